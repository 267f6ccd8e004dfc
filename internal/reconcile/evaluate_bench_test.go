package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/registry"
)

// benchTags returns n distinct semver tags, 1.0.0 upwards.
func benchTags(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("1.%d.%d", i/100, i%100)
	}
	return tags
}

// benchEvaluator is the fixture's Evaluator without the Events and CloudEvents that are not
// part of what is measured.
func benchEvaluator(f *evalFixture) *reconcile.Evaluator {
	return &reconcile.Evaluator{
		Kube: f.Kube, Store: f.Reader, Registry: registry.New(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// BenchmarkEvaluate100kTags is one evaluation end to end over 100k stored tags: the policy,
// repository and tag store reads, semver selection and the status patch. Each iteration edits
// the range first (outside the timer), so that every evaluation selects a new latest tag and
// writes it.
func BenchmarkEvaluate100kTags(b *testing.B) {
	f := newEvalFixture(b)
	f.Repo(b, f.NS, "app", "ghcr.io/org/app")
	f.Put(b, f.NS, "app", benchTags(100_000)...)
	f.Policy(b, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver(">=1.0.0")})
	ev := benchEvaluator(f)
	ctx := context.Background()
	ranges := []string{"<1.500.0", ">=1.0.0"}
	want := []string{"1.499.99", "1.999.99"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		f.Edit(b, f.NS, "app", func(s *v1.ImagePolicySpec) { s.Policy = evaltest.Semver(ranges[i%2]) })
		b.StartTimer()
		out, err := ev.Evaluate(ctx, f.NS, "app")
		if err != nil || !out.Changed || out.Latest.Tag != want[i%2] {
			b.Fatalf("iteration %d: %+v, %v", i, out, err)
		}
	}
}

// BenchmarkEvaluateRepository100Policies is the work after one scan of a repository that 100
// policies use: EvaluateRepository reads the tags once and evaluates and writes every policy.
// Each iteration stores a new tag list first (outside the timer), as a scan does.
func BenchmarkEvaluateRepository100Policies(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run("tags="+strconv.Itoa(n), func(b *testing.B) {
			f := newEvalFixture(b)
			f.Repo(b, f.NS, "app", "ghcr.io/org/app")
			base := benchTags(n)
			f.Put(b, f.NS, "app", base...)
			choices := []v1.ImagePolicyChoice{evaltest.Semver(">=1.0.0"), evaltest.Semver("*"), evaltest.Alphabetical(v1.OrderAsc), evaltest.Semver(">=1.0.0-0")}
			for i := range 100 {
				f.Policy(b, f.NS, fmt.Sprintf("p%03d", i), v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: choices[i%len(choices)]})
			}
			ev := benchEvaluator(f)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				f.Put(b, f.NS, "app", append(base, "2.0."+strconv.Itoa(i))...)
				b.StartTimer()
				outs, err := ev.EvaluateRepository(ctx, f.NS, "app")
				if err != nil || len(outs) != 100 {
					b.Fatalf("iteration %d: %d outcomes, %v", i, len(outs), err)
				}
				for _, o := range outs {
					if o.Result != reconcile.PolicySucceeded || !o.Changed {
						b.Fatalf("iteration %d: %+v", i, o)
					}
				}
			}
		})
	}
}

// BenchmarkEvaluateRepositoryAmong10kPolicies is the work after one scan of a repository that one
// policy uses, in a cluster that holds 10,000 other ImagePolicies: what finding the repository's
// policies costs when the cluster is large. list-requests/op counts the ImagePolicy list pages.
func BenchmarkEvaluateRepositoryAmong10kPolicies(b *testing.B) {
	f := newEvalFixture(b)
	f.Repo(b, f.NS, "app", "ghcr.io/org/app")
	base := benchTags(1_000)
	f.Put(b, f.NS, "app", base...)
	f.Policy(b, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver(">=1.0.0")})

	cfg := rest.CopyConfig(f.Env.Config)
	cfg.QPS = -1
	bulk, err := kube.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	others := f.Env.Namespace(b)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < 10_000; i = int(next.Add(1) - 1) {
				_, err := bulk.Policies.Create(ctx, &v1.ImagePolicy{
					ObjectMeta: metav1.ObjectMeta{Namespace: others, Name: fmt.Sprintf("p%05d", i)},
					Spec: v1.ImagePolicySpec{
						ImageRepositoryRef: evaltest.RefTo(fmt.Sprintf("repo-%05d", i)),
						Policy:             evaltest.Semver(">=1.0.0"),
					},
				})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}

	counting := &requestCounter{}
	c := f.Env.ClientSeeing(b, nil, counting.see)
	ev := benchEvaluator(f)
	ev.Kube = c
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		f.Put(b, f.NS, "app", append(base, "2.0."+strconv.Itoa(i))...)
		counting.lists.Store(0)
		b.StartTimer()
		outs, err := ev.EvaluateRepository(ctx, f.NS, "app")
		if err != nil || len(outs) != 1 || outs[0].Result != reconcile.PolicySucceeded {
			b.Fatalf("iteration %d: %+v, %v", i, outs, err)
		}
		b.StopTimer()
		b.ReportMetric(float64(counting.lists.Load()), "list-requests/op")
		b.StartTimer()
	}
}

// BenchmarkAdvanceRepository100Policies is the work after one push to a repository that 100
// policies use: EvaluateChange with the push's signed delta decides each policy from its own
// latestRef and the added tag, without the tag store (the evaluator's store holds only the key),
// and writes each status. Each iteration adds a new best tag first (outside the timer), as a
// push's scan does, and waits for the watch cache to show the statuses the last one wrote.
func BenchmarkAdvanceRepository100Policies(b *testing.B) {
	f := newEvalFixture(b)
	f.Repo(b, f.NS, "app", "ghcr.io/org/app")
	f.Put(b, f.NS, "app", benchTags(10_000)...)
	choices := []v1.ImagePolicyChoice{evaltest.Semver(">=1.0.0"), evaltest.Semver("*"), evaltest.Semver(">=1.0.0-0"),
		evaltest.Numerical(v1.OrderAsc)}
	var names []string
	for i := range 100 {
		name := fmt.Sprintf("p%03d", i)
		spec := v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: choices[i%len(choices)]}
		if i%4 == 3 {
			spec.FilterTags = &v1.TagFilter{Pattern: `^1\.(?P<n>[0-9]+)\.0$`, Extract: "$n"}
		}
		f.Policy(b, f.NS, name, spec)
		names = append(names, f.NS+"/"+name)
	}
	ctx := context.Background()
	if outs, err := benchEvaluator(f).EvaluateRepository(ctx, f.NS, "app"); err != nil || len(outs) != 100 {
		b.Fatalf("first evaluation: %d outcomes, %v", len(outs), err)
	}
	ev := f.Storeless(b)
	ev.Sink, ev.Recorder, ev.Log = nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		f.Cached(b, names...)
		c := f.add(b, f.NS, "app", fmt.Sprintf("1.%d.0", 100+i))
		b.StartTimer()
		outs, err := ev.EvaluateChange(ctx, c)
		if err != nil || len(outs) != 100 {
			b.Fatalf("iteration %d: %d outcomes, %v", i, len(outs), err)
		}
		for _, o := range outs {
			if o.Result != reconcile.PolicySucceeded || !o.Changed {
				b.Fatalf("iteration %d: %+v", i, o)
			}
		}
	}
}
