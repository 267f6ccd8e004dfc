package reconcile_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/testenv"
)

const (
	cronBenchObjects = 10_000
	// cronBenchDueEvery makes one object in a hundred due, of each kind. The due policies
	// reference repositories that are not due, so that every reason applies as it would alone.
	cronBenchDueEvery = 100
	cronBenchInterval = time.Hour
)

// Why the due objects of the fixture are due; the others are not due for any reason.
var (
	cronBenchRepoReasons   = []string{reconcile.DueNeverScanned, reconcile.DueRequested, reconcile.DueInterval, reconcile.DueGeneration}
	cronBenchPolicyReasons = []string{reconcile.DueGeneration, reconcile.DueRequested, reconcile.DueTagsChanged}
)

// cronFixture is the benchmark's 10,000 ImageRepositories and 10,000 ImagePolicies. Creating
// them takes minutes, so every run of the benchmark in one test binary (-count) shares them.
type cronFixture struct {
	ns      string
	dueRepo map[string]string // name: reason
	duePol  map[string]string
}

var (
	cronFixtureMu  sync.Mutex
	cronFixtureVal *cronFixture
)

func cronBenchFixture(b *testing.B, env *testenv.Env) *cronFixture {
	b.Helper()
	cronFixtureMu.Lock()
	defer cronFixtureMu.Unlock()
	if cronFixtureVal != nil {
		return cronFixtureVal
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // no client-side limit: the apiserver is the bottleneck
	c, err := kube.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	f := &cronFixture{ns: env.Namespace(b), dueRepo: map[string]string{}, duePol: map[string]string{}}
	for i := 0; i < cronBenchObjects; i += cronBenchDueEvery {
		k := i / cronBenchDueEvery
		f.dueRepo[cronRepoName(i)] = cronBenchRepoReasons[k%len(cronBenchRepoReasons)]
		f.duePol[cronPolicyName(i+cronBenchDueEvery/2)] = cronBenchPolicyReasons[k%len(cronBenchPolicyReasons)]
	}
	start := time.Now()
	ctx := context.Background()
	var (
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
		next     atomic.Int64
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= cronBenchObjects {
					return
				}
				if err := f.create(ctx, c, i, start); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.Logf("created %d ImageRepositories and %d ImagePolicies in %s", cronBenchObjects, cronBenchObjects, time.Since(start).Round(time.Second))
	cronFixtureVal = f
	return f
}

func cronRepoName(i int) string   { return fmt.Sprintf("repo-%05d", i) }
func cronPolicyName(i int) string { return fmt.Sprintf("policy-%05d", i) }

// create creates ImageRepository i and ImagePolicy i and writes their status through the status
// subresource, as the functions would have left it: either reconciled at scanTime and not due
// for an hour, or due for the reason the fixture gives.
func (f *cronFixture) create(ctx context.Context, c *kube.Client, i int, scanTime time.Time) error {
	name := cronRepoName(i)
	repoReason := f.dueRepo[name]
	repo := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: v1.ImageRepositorySpec{
			Image:    "ghcr.io/org/app-" + strconv.Itoa(i),
			Interval: metav1.Duration{Duration: cronBenchInterval},
		},
	}
	if repoReason == reconcile.DueRequested {
		repo.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "requested"}
	}
	created, err := c.Repositories.Create(ctx, repo)
	if err != nil {
		return err
	}
	revision := "rev-" + strconv.Itoa(i)
	if repoReason != reconcile.DueNeverScanned {
		canonical, err := imagename.Canonical(repo.Spec.Image, false)
		if err != nil {
			return err
		}
		st := v1.ImageRepositoryStatus{
			ObservedGeneration:    created.Generation,
			CanonicalImageName:    canonical,
			ObservedExclusionList: created.GetExclusionList(),
			LastScanResult:        &v1.ScanResult{Revision: revision, TagCount: 10, ScanTime: metav1.NewTime(scanTime)},
			Conditions: []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionTrue,
				Reason: v1.SucceededReason, Message: "ok", LastTransitionTime: metav1.NewTime(scanTime)}},
		}
		switch repoReason {
		case reconcile.DueRequested:
			st.LastHandledReconcileAt = "handled-before"
		case reconcile.DueInterval:
			st.LastScanResult.ScanTime = metav1.NewTime(scanTime.Add(-2 * cronBenchInterval))
		case reconcile.DueGeneration:
			st.ObservedGeneration = created.Generation - 1
		}
		if _, err := c.Repositories.MergeStatus(ctx, f.ns, name, statusBody(st)); err != nil {
			return err
		}
	}

	polName := cronPolicyName(i)
	polReason := f.duePol[polName]
	pol := &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: polName},
		Spec: v1.ImagePolicySpec{
			ImageRepositoryRef: v1.NamespacedObjectReference{Name: name},
			Policy:             evaltest.Semver("1.x"),
		},
	}
	if polReason == reconcile.DueRequested {
		pol.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "requested"}
	}
	createdPol, err := c.Policies.Create(ctx, pol)
	if err != nil {
		return err
	}
	evaluated := revision
	if polReason == reconcile.DueTagsChanged {
		evaluated = "rev-older"
	}
	pst := v1.ImagePolicyStatus{
		LatestRef:            &v1.ImageRef{Name: repo.Spec.Image, Tag: "1.0.0"},
		ObservedGeneration:   createdPol.Generation,
		ObservedTagsRevision: evaluated,
		Conditions: []metav1.Condition{
			{Type: v1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1.SucceededReason,
				Message: "latest image tag is 1.0.0", LastTransitionTime: metav1.NewTime(scanTime)},
			{Type: v1.TagsEvaluatedCondition, Status: metav1.ConditionTrue, Reason: v1.EvaluatedReason,
				Message: evaluated, LastTransitionTime: metav1.NewTime(scanTime)},
		},
	}
	switch polReason {
	case reconcile.DueGeneration:
		pst.ObservedGeneration = createdPol.Generation - 1
	case reconcile.DueRequested:
		pst.LastHandledReconcileAt = "handled-before"
	}
	_, err = c.Policies.MergeStatus(ctx, f.ns, polName, statusBody(pst))
	return err
}

// statusBody is a merge patch that sets the whole status.
func statusBody(status any) []byte {
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		panic(err)
	}
	return data
}

// requestCounter counts the requests a client sends, and among them the list calls of
// ImageRepositories and ImagePolicies; its see is a testenv.Env.ClientSeeing callback.
type requestCounter struct {
	requests, lists atomic.Int64
}

func (c *requestCounter) see(req *http.Request) {
	c.requests.Add(1)
	path := strings.TrimSuffix(req.URL.Path, "/")
	if req.Method == http.MethodGet && (strings.HasSuffix(path, "/"+v1.ImageRepositoryResource) || strings.HasSuffix(path, "/"+v1.ImagePolicyResource)) {
		c.lists.Add(1)
	}
}

// countingSink stands for a function: a real CloudEvents receiver over HTTP that counts the
// requests it receives and the events about each object of one namespace.
type countingSink struct {
	srv      *httptest.Server
	ns       string
	requests atomic.Int64
	mu       sync.Mutex
	got      map[string]string // name: reason, in ns
	dup      int
	first    time.Time
}

func newCountingSink(b *testing.B, ns string) *countingSink {
	b.Helper()
	s := &countingSink{ns: ns, got: map[string]string{}}
	h := events.Handler(func(_ context.Context, e cloudevents.Event) error {
		var ref events.ObjectRef
		if err := events.Decode(e, &ref); err != nil {
			return err
		}
		if ref.Namespace == s.ns {
			s.mu.Lock()
			if s.first.IsZero() {
				s.first = time.Now()
			}
			if _, ok := s.got[ref.Name]; ok {
				s.dup++
			}
			s.got[ref.Name] = ref.Reason
			s.mu.Unlock()
		}
		return nil
	})
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	b.Cleanup(s.srv.Close)
	return s
}

// take returns and forgets what the sink received in its namespace: the events by name, the
// number of names received more than once and when the first event arrived.
func (s *countingSink) take() (map[string]string, int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, dup, first := s.got, s.dup, s.first
	s.got, s.dup, s.first = map[string]string{}, 0, time.Time{}
	return got, dup, first
}

func (s *countingSink) sender(b *testing.B) *events.Sender {
	b.Helper()
	snd, err := events.NewSender(s.srv.URL, events.SourceCron, nil)
	if err != nil {
		b.Fatal(err)
	}
	return snd
}

// apiserverRequests returns the apiserver's own count of the requests it has served for
// reflector's API group (apiserver_request_total), by verb.
func apiserverRequests(b *testing.B, env *testenv.Env) map[string]float64 {
	b.Helper()
	raw, err := env.Get(context.Background(), "/metrics")
	if err != nil {
		b.Fatalf("reading the apiserver's metrics: %v", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `group="`+v1.GroupVersion.Group+`"`) {
			continue
		}
		labels, value, ok := strings.Cut(line[len("apiserver_request_total{"):], "} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		verb := "?"
		for l := range strings.SplitSeq(labels, ",") {
			if v, ok := strings.CutPrefix(l, `verb="`); ok {
				verb = strings.TrimSuffix(v, `"`)
			}
		}
		out[verb] += n
	}
	return out
}

// BenchmarkCronPass10k measures one cron pass over 10,000 ImageRepositories and 10,000
// ImagePolicies of which 1% of each kind are due, against the test kube-apiserver, with the
// scan and policy functions standing as HTTP servers on 127.0.0.1. The pass is configured as
// cmd/cron configures it (the production page size, concurrency and request limits), except
// that it spreads nothing: the spread window is a deliberate wait, not work. Besides the time
// it reports the requests the pass sent to the apiserver (counted by the client's transport,
// and by the apiserver's own metrics) and to the functions, and the time until the first
// dispatch arrives, which is the time of the two listings.
func BenchmarkCronPass10k(b *testing.B) {
	env := testenv.Kube(b)
	f := cronBenchFixture(b, env)

	ct := &requestCounter{}
	c := env.ClientSeeing(b, func(cfg *rest.Config) { cfg.QPS, cfg.Burst = 50, 300 }, ct.see) // kube.Config's limits
	scan, policy := newCountingSink(b, f.ns), newCountingSink(b, f.ns)
	pass := &reconcile.Pass{
		Kube: c, Scan: scan.sender(b), Policy: policy.sender(b),
		Period: time.Minute, Concurrency: 8, PageSize: kube.DefaultPageSize,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx := context.Background()
	before := apiserverRequests(b, env)
	var passes, objects, dispatched int
	var listing time.Duration
	for b.Loop() {
		start := time.Now()
		sum, err := pass.Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		passes++
		objects += sum.Repositories + sum.Policies
		dispatched += sum.Dispatched
		if sum.Failed != 0 || sum.Dispatched != sum.Due {
			b.Fatalf("pass %d: %+v", passes, sum)
		}
		var first time.Time
		for _, k := range []struct {
			what string
			s    *countingSink
			want map[string]string
		}{{"scan", scan, f.dueRepo}, {"policy", policy, f.duePol}} {
			got, dup, at := k.s.take()
			if dup != 0 || fmt.Sprint(got) != fmt.Sprint(k.want) {
				b.Fatalf("pass %d: %d %s requests (%d duplicates) in %s, want %d", passes, len(got), k.what, dup, f.ns, len(k.want))
			}
			if first.IsZero() || at.Before(first) {
				first = at
			}
		}
		// Dispatching starts after both listings, so the first arrival bounds their time.
		listing += first.Sub(start)
	}
	after := apiserverRequests(b, env)
	n := float64(passes)
	var served float64
	for verb, v := range after {
		served += v - before[verb]
	}
	b.ReportMetric(float64(objects)/n, "objects/op")
	b.ReportMetric(listing.Seconds()/n, "s-to-first-dispatch/op")
	b.ReportMetric(float64(dispatched)/n, "dispatches/op")
	b.ReportMetric(float64(ct.requests.Load())/n, "api-requests/op")
	b.ReportMetric(float64(ct.lists.Load())/n, "pages/op")
	b.ReportMetric(served/n, "apiserver-served/op")
	b.ReportMetric(float64(scan.requests.Load()+policy.requests.Load())/n, "fn-requests/op")
}
