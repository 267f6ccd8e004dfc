package stack_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// BenchmarkReconcileRequest measures what `flux reconcile` waits for: the time from setting
// the reconcile.fluxcd.io/requestedAt annotation to status.lastHandledReconcileAt carrying its
// value, on an ImageRepository (repository_p50_ms, repository_p99_ms: an annotation reaches the
// scan function through Knative's ApiServerSource receive adapter, which scans) and on an
// ImagePolicy (policy_p50_ms, policy_p99_ms: through the adapter to the policy function). The
// stack runs as `make run` runs it; the cron reconciler's period is long enough that only the
// adapter's events can explain the figures. b.N counts requests of each kind.
func BenchmarkReconcileRequest(b *testing.B) {
	ctx := context.Background()
	s := start(b, stack.Options{CronEvery: time.Hour})
	image := s.Registry + "/bench/reconcile"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(manifests, image))); err != nil {
		b.Fatal(err)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		b.Fatal(err)
	}
	waitForPolicy(b, s, "stable", "1.0.0")

	// Checks every 2 ms: the resolution of the measured latency.
	handled := func(token string, get func() (string, error)) time.Duration {
		start := time.Now()
		testenv.EventuallyEvery(b, 30*time.Second, 2*time.Millisecond, func() error {
			got, err := get()
			if err == nil && got != token {
				err = fmt.Errorf("request %s not handled yet: lastHandledReconcileAt %q", token, got)
			}
			return err
		})
		return time.Since(start)
	}
	var repo, pol []time.Duration
	b.ResetTimer()
	for i := range b.N {
		token := fmt.Sprintf("%s-%d", time.Now().Format(time.RFC3339Nano), i)
		if _, err := s.Kube.Repositories.RequestReconcile(ctx, "default", "app", token); err != nil {
			b.Fatal(err)
		}
		repo = append(repo, handled(token, func() (string, error) {
			r, err := s.Kube.Repositories.Get(ctx, "default", "app")
			return r.Status.LastHandledReconcileAt, err
		}))
		if _, err := s.Kube.Policies.RequestReconcile(ctx, "default", "stable", token); err != nil {
			b.Fatal(err)
		}
		pol = append(pol, handled(token, func() (string, error) {
			p, err := s.Kube.Policies.Get(ctx, "default", "stable")
			return p.Status.LastHandledReconcileAt, err
		}))
	}
	b.StopTimer()
	reportPercentiles(b, "repository", repo)
	reportPercentiles(b, "policy", pol)
}

// BenchmarkFluxReconcile measures the wall time of `flux reconcile image repository` and
// `flux reconcile image policy` with the real flux CLI, which annotates, looks once at once and
// then every 2 s: reflector has handled the request by the CLI's first look when the median is
// well under 2 s. b.N counts commands of each kind.
func BenchmarkFluxReconcile(b *testing.B) {
	ctx := context.Background()
	s := start(b, stack.Options{CronEvery: time.Hour})
	image := s.Registry + "/bench/flux"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(manifests, image))); err != nil {
		b.Fatal(err)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		b.Fatal(err)
	}
	waitForPolicy(b, s, "stable", "1.0.0")
	flux := newFluxCLI(b, s, "default")
	run := func(args ...string) time.Duration {
		start := time.Now()
		if stdout, stderr, err := flux.run(ctx, args...); err != nil {
			b.Fatalf("flux %v: %v\n%s%s", args, err, stdout, stderr)
		}
		return time.Since(start)
	}
	var repo, pol []time.Duration
	b.ResetTimer()
	for range b.N {
		repo = append(repo, run("reconcile", "image", "repository", "app"))
		pol = append(pol, run("reconcile", "image", "policy", "stable"))
	}
	b.StopTimer()
	for name, d := range map[string][]time.Duration{"repository": repo, "policy": pol} {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Milliseconds()), name+"_median_ms")
		b.ReportMetric(float64(d[len(d)-1].Milliseconds()), name+"_max_ms")
	}
}
