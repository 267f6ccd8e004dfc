package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sink is a real CloudEvents receiver over HTTP that records what it receives.
type sink struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []events.ObjectRef
	when []time.Time
	// changed are the TagsChanged events among them.
	changed []events.TagsChanged
}

func newSink(t *testing.T) *sink {
	t.Helper()
	s := &sink{}
	s.srv = httptest.NewServer(events.Handler(func(_ context.Context, e cloudevents.Event) error {
		var ref events.ObjectRef
		if err := events.Decode(e, &ref); err != nil {
			return err
		}
		s.mu.Lock()
		if e.Type() == events.TypeTagsChanged {
			var c events.TagsChanged
			if err := events.Decode(e, &c); err != nil {
				s.mu.Unlock()
				return err
			}
			s.changed = append(s.changed, c)
		}
		s.got = append(s.got, ref)
		s.when = append(s.when, time.Now())
		s.mu.Unlock()
		return nil
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) sender(t *testing.T) *events.Sender {
	t.Helper()
	snd, err := events.NewSender(s.srv.URL, events.SourceCron, nil)
	if err != nil {
		t.Fatal(err)
	}
	return snd
}

// lastChanged returns the last TagsChanged event the sink received.
func (s *sink) lastChanged(t *testing.T) events.TagsChanged {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.changed) == 0 {
		t.Fatal("no TagsChanged event received")
	}
	return s.changed[len(s.changed)-1]
}

// names returns the "name: reason" of what the sink received from namespace ns, sorted.
func (s *sink) names(ns string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.got {
		if r.Namespace == ns {
			out = append(out, r.Name+": "+r.Reason)
		}
	}
	sort.Strings(out)
	return out
}

func newRepo(ns, name string) *v1.ImageRepository {
	return &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ImageRepositorySpec{
			Image:    "ghcr.io/org/" + name,
			Interval: metav1.Duration{Duration: 5 * time.Minute},
		},
	}
}

// markScanned writes the status a successful scan at scanTime would have written.
func markScanned(t *testing.T, c *kube.Client, ns, name string, scanTime time.Time) {
	t.Helper()
	_, err := c.Repositories.UpdateStatus(context.Background(), ns, name, func(r *v1.ImageRepository) error {
		r.Status.ObservedGeneration = r.Generation
		r.Status.CanonicalImageName = "ghcr.io/org/" + name
		r.Status.ObservedExclusionList = r.GetExclusionList()
		r.Status.LastScanResult = &v1.ScanResult{TagCount: 1, Revision: "r", ScanTime: metav1.NewTime(scanTime)}
		if token, ok := r.Annotations[v1.ReconcileRequestAnnotation]; ok {
			r.Status.LastHandledReconcileAt = token
		}
		r.Status.Conditions = []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionTrue,
			Reason: v1.SucceededReason, Message: "ok", LastTransitionTime: metav1.NewTime(scanTime)}}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCronIntegrationDueRules(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	now := time.Now()
	for _, name := range []string{"never", "fresh", "stale", "requested", "edited", "suspended"} {
		r := newRepo(ns, name)
		r.Spec.Suspend = name == "suspended"
		if _, err := c.Repositories.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"fresh", "requested", "edited", "suspended"} {
		markScanned(t, c, ns, name, now)
	}
	markScanned(t, c, ns, "stale", now.Add(-6*time.Minute))
	if _, err := c.Repositories.RequestReconcile(ctx, ns, "requested", testenv.RequestToken(now)); err != nil {
		t.Fatal(err)
	}
	edited, err := c.Repositories.Get(ctx, ns, "edited")
	if err != nil {
		t.Fatal(err)
	}
	edited.Spec.Interval.Duration = 10 * time.Minute
	if _, err := c.Repositories.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	newPolicy := &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "new"},
		Spec: v1.ImagePolicySpec{
			ImageRepositoryRef: v1.NamespacedObjectReference{Name: "fresh"},
			Policy:             v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "1.x"}},
		},
	}
	if _, err := c.Policies.Create(ctx, newPolicy); err != nil {
		t.Fatal(err)
	}
	// A policy that still says Ready for a repository that is gone missed the deletion's
	// announcement.
	orphan := newPolicy.DeepCopy()
	orphan.Name, orphan.Spec.ImageRepositoryRef.Name = "orphan", "gone"
	if _, err := c.Policies.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies.UpdateStatus(ctx, ns, "orphan", func(p *v1.ImagePolicy) error {
		p.Status = v1.ImagePolicyStatus{ObservedGeneration: p.Generation,
			Conditions: []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1.SucceededReason, LastTransitionTime: metav1.Now()}}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	scan, policy := newSink(t), newSink(t)
	pass := &reconcile.Pass{Kube: c, Scan: scan.sender(t), Policy: policy.sender(t),
		Period: time.Minute, Concurrency: 4, PageSize: 2}
	sum, err := pass.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"edited: generation changed", "never: never scanned", "requested: reconcile requested", "stale: interval elapsed"}
	if got := scan.names(ns); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scan requests %q, want %q", got, want)
	}
	if got := policy.names(ns); fmt.Sprint(got) != fmt.Sprint([]string{"new: generation changed", "orphan: " + reconcile.DueRepositoryGone}) {
		t.Errorf("policy requests %q", got)
	}
	if sum.Failed != 0 || sum.Dispatched != sum.Due || sum.Due < 5 {
		t.Errorf("summary %+v", sum)
	}
}

// TestCronIntegrationFunctionDown shows that a pass against a stopped function neither hangs
// nor loses the request: the object stays due and the next pass delivers it.
func TestCronIntegrationFunctionDown(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	if _, err := c.Repositories.Create(ctx, newRepo(ns, "app")); err != nil {
		t.Fatal(err)
	}
	markScanned(t, c, ns, "app", time.Now())
	if _, err := c.Repositories.RequestReconcile(ctx, ns, "app", testenv.RequestToken(time.Now())); err != nil {
		t.Fatal(err)
	}

	down := newSink(t)
	downSender := down.sender(t)
	down.srv.Close()
	policy := newSink(t)
	pass := &reconcile.Pass{Kube: c, Scan: downSender, Policy: policy.sender(t), Period: time.Minute, Concurrency: 2}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	sum, err := pass.Run(pctx)
	cancel()
	if err != nil {
		t.Fatalf("a down function failed the pass: %v", err)
	}
	if sum.Failed < 1 {
		t.Errorf("summary %+v: want the failed dispatch counted", sum)
	}

	up := newSink(t)
	pass.Scan = up.sender(t)
	if _, err := pass.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := up.names(ns); fmt.Sprint(got) != "[app: reconcile requested]" {
		t.Errorf("next pass delivered %q", got)
	}
}

// TestCronIntegrationSpread creates 5,000 ImageRepositories due at the same moment and checks
// that one pass spreads their scan requests over the spread window.
func TestCronIntegrationSpread(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 5,000 objects")
	}
	env := testenv.Kube(t)
	c := env.Client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	const n = 5000
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			_, err := c.Repositories.Create(ctx, newRepo(ns, fmt.Sprintf("repo-%04d", i)))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	scan, policy := newSink(t), newSink(t)
	const spread = 10 * time.Second
	pass := &reconcile.Pass{Kube: c, Scan: scan.sender(t), Policy: policy.sender(t),
		Period: time.Minute, Spread: spread, Concurrency: 32, PageSize: kube.DefaultPageSize}
	sum, err := pass.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Dispatched < n || sum.Failed != 0 {
		t.Fatalf("summary %+v", sum)
	}
	// A busy machine can only delay a dispatch, never advance it, so these hold however slow
	// the receiver is: the dispatches span the window, and its first fifth holds about a fifth
	// of them rather than all at once.
	scan.mu.Lock()
	defer scan.mu.Unlock()
	var times []time.Time
	for i, when := range scan.when {
		if scan.got[i].Namespace == ns {
			times = append(times, when)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	first, last := times[0], times[len(times)-1]
	if span := last.Sub(first); span < spread*9/10 {
		t.Errorf("dispatches span %s, want about %s", span, spread)
	}
	early := 0
	for _, when := range times {
		if when.Sub(first) < spread/5 {
			early++
		}
	}
	if early > 2*n/5 {
		t.Errorf("%d of %d dispatches in the first fifth of the window", early, n)
	}
}

// TestCronIntegrationStoreCleanup shows that a pass deletes the store entries of deleted
// ImageRepositories and keeps the others.
func TestCronIntegrationStoreCleanup(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	kept, err := c.Repositories.Create(ctx, newRepo(ns, "kept"))
	if err != nil {
		t.Fatal(err)
	}
	markScanned(t, c, ns, "kept", time.Now())
	id, err := reconcile.RepositoryIdentity(kept)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(t.TempDir())
	defer st.Close()
	for _, name := range []string{"kept", "deleted"} {
		if _, _, err := st.Put(ctx, reconcile.StoreKey(ns, name), id, []string{"1.0.0"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	scan, policy := newSink(t), newSink(t)
	pass := &reconcile.Pass{Kube: c, Scan: scan.sender(t), Policy: policy.sender(t), Store: st, Period: time.Minute}
	sum, err := pass.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.StoreDeleted < 1 {
		t.Errorf("summary %+v", sum)
	}
	if _, err := st.Get(ctx, reconcile.StoreKey(ns, "deleted"), id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("entry of a deleted repository: %v", err)
	}
	if e, err := st.Get(ctx, reconcile.StoreKey(ns, "kept"), id); err != nil || len(e.Tags) != 1 {
		t.Errorf("entry of a live repository: %+v, %v", e, err)
	}
	if got := scan.names(ns); len(got) != 0 {
		t.Errorf("scan requests with every tag list stored: %v", got)
	}

	// A repository whose status shows a scan but whose tags the store lacks (the store was
	// lost, or Flux's controller scanned it) is scanned now rather than at its interval; one
	// whose last scan failed keeps the retry rule, and a suspended one is left alone.
	for _, name := range []string{"migrated", "failing", "paused"} {
		if _, err := c.Repositories.Create(ctx, newRepo(ns, name)); err != nil {
			t.Fatal(err)
		}
		markScanned(t, c, ns, name, time.Now())
	}
	if _, err := c.Repositories.UpdateStatus(ctx, ns, "failing", func(r *v1.ImageRepository) error {
		r.Status.Conditions[0].Status, r.Status.Conditions[0].Reason = metav1.ConditionFalse, v1.ReadOperationFailedReason
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	paused, err := c.Repositories.Get(ctx, ns, "paused")
	if err != nil {
		t.Fatal(err)
	}
	paused.Spec.Suspend = true
	if _, err := c.Repositories.Update(ctx, paused); err != nil {
		t.Fatal(err)
	}
	markScanned(t, c, ns, "paused", time.Now())
	if _, err := pass.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// The failing one is retried once per retry period, which this pass may or may not cross.
	got := slices.DeleteFunc(scan.names(ns), func(n string) bool { return n == "failing: "+reconcile.DueRetry })
	if want := []string{"migrated: " + reconcile.DueNotStored}; !slices.Equal(got, want) {
		t.Errorf("scan requests %v, want %v", got, want)
	}
}

// TestCronIntegrationStoreFaults: objects that the tag store failed (full, damaged) are sent again
// at the first pass whose own store call succeeds, and the repository of a policy that read
// damaged tags is scanned, since only a scan replaces them; a pass whose store call fails sends
// neither, and a failure of another kind keeps the retry period.
func TestCronIntegrationStoreFaults(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	st := store.New(t.TempDir())
	defer st.Close()
	fail := func(name, reason string) {
		t.Helper()
		if _, err := c.Repositories.UpdateStatus(ctx, ns, name, func(r *v1.ImageRepository) error {
			r.Status.Conditions[0].Status, r.Status.Conditions[0].Reason = metav1.ConditionFalse, reason
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"full", "read-damaged", "failing"} {
		r, err := c.Repositories.Create(ctx, newRepo(ns, name))
		if err != nil {
			t.Fatal(err)
		}
		markScanned(t, c, ns, name, time.Now())
		id, err := reconcile.RepositoryIdentity(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.Put(ctx, reconcile.StoreKey(ns, name), id, []string{"1.0.0"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	fail("full", v1.TagStoreFullReason)
	fail("failing", v1.AuthenticationFailedReason)
	if _, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
		Spec:       v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("read-damaged"), Policy: evaltest.Semver("*")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies.UpdateStatus(ctx, ns, "reader", func(p *v1.ImagePolicy) error {
		p.Status.ObservedGeneration = p.Generation
		p.Status.Conditions = []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: v1.TagStoreDamagedReason, Message: "tag store is unreadable", LastTransitionTime: metav1.Now()}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A store that cannot be opened: a file stands where its directory should be.
	blocked := filepath.Join(t.TempDir(), "store")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	broken := store.New(blocked)
	defer broken.Close()
	retries := func(n string) bool { return strings.HasSuffix(n, ": "+reconcile.DueRetry) }
	for _, tc := range []struct {
		store        *store.Store
		scan, policy []string
	}{
		{broken, nil, nil},
		{st, []string{"full: " + reconcile.DueStoreBack, "read-damaged: " + reconcile.DueStoreDamaged}, []string{"reader: " + reconcile.DueStoreBack}},
	} {
		scan, policy := newSink(t), newSink(t)
		pass := &reconcile.Pass{Kube: c, Scan: scan.sender(t), Policy: policy.sender(t), Store: tc.store, Period: time.Minute}
		if _, err := pass.Run(ctx); err != nil {
			t.Fatal(err)
		}
		// Failed objects are also retried once per retry period, which a pass may or may not
		// cross; a store fault's retry that comes first stands for the store's rule.
		storeBack := func(names []string) []string {
			for i, n := range names {
				if tc.store == st && (n == "full: "+reconcile.DueRetry || n == "reader: "+reconcile.DueRetry) {
					names[i] = strings.TrimSuffix(n, reconcile.DueRetry) + reconcile.DueStoreBack
				}
			}
			return slices.DeleteFunc(names, retries)
		}
		if got := storeBack(scan.names(ns)); !slices.Equal(got, tc.scan) {
			t.Errorf("scan requests %v, want %v", got, tc.scan)
		}
		if got := storeBack(policy.names(ns)); !slices.Equal(got, tc.policy) {
			t.Errorf("policy requests %v, want %v", got, tc.policy)
		}
	}
}

// countingKeys counts the passes' reads of a store's keys.
type countingKeys struct {
	*store.Store
	reads atomic.Int32
}

func (c *countingKeys) Keys(ctx context.Context) ([]string, error) {
	c.reads.Add(1)
	return c.Store.Keys(ctx)
}

// TestCronIntegrationStoreRounds shows that with StoreEvery a pass reads the store only in a store
// round, or when it lists an object that reports a store failure, and that only a store round
// rescans repositories whose tags are not stored and deletes the entries of deleted ones.
func TestCronIntegrationStoreRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts etcd and kube-apiserver; run it without -short")
	}
	// An apiserver of its own: the shared one holds other tests' store failures, for which any
	// pass reads the store.
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	env, err := testenv.Start(sctx, testenv.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	c := env.Client(t)
	ns := env.Namespace(t)
	st := &countingKeys{Store: store.New(t.TempDir())}
	defer st.Close()
	for _, name := range []string{"kept", "migrated"} {
		if _, err := c.Repositories.Create(ctx, newRepo(ns, name)); err != nil {
			t.Fatal(err)
		}
		markScanned(t, c, ns, name, time.Now())
	}
	id := store.Identity{UID: "uid", Image: "ghcr.io/org/kept"}
	for _, name := range []string{"kept", "deleted"} {
		if _, _, err := st.Put(ctx, reconcile.StoreKey(ns, name), id, []string{"1.0.0"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// With a pass a minute and a store round every two, of two minutes in a row one is a
	// round and the other is not.
	const every = 2 * time.Minute
	round, between := time.Now(), time.Now().Add(time.Minute)
	if round.UnixNano()%int64(every) >= int64(time.Minute) {
		round, between = between, round
	}
	run := func(now time.Time) (reconcile.Summary, []string) {
		t.Helper()
		scan, policy := newSink(t), newSink(t)
		pass := &reconcile.Pass{Kube: c, Scan: scan.sender(t), Policy: policy.sender(t), Store: st,
			Period: time.Minute, StoreEvery: every, Now: func() time.Time { return now }}
		sum, err := pass.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return sum, scan.names(ns)
	}
	deletedStored := func() bool {
		_, err := st.Get(ctx, reconcile.StoreKey(ns, "deleted"), id)
		return err == nil
	}

	sum, scans := run(between)
	if got := st.reads.Load(); got != 0 || sum.StoreRead {
		t.Errorf("a pass between rounds with no store failure read the keys %d times (summary %+v)", got, sum)
	}
	if len(scans) != 0 || !deletedStored() {
		t.Errorf("a pass that did not read the store sent %v, kept the deleted entry: %v", scans, deletedStored())
	}

	// A repository whose last scan the store failed has the store read between rounds, once.
	if _, err := c.Repositories.Create(ctx, newRepo(ns, "full")); err != nil {
		t.Fatal(err)
	}
	markScanned(t, c, ns, "full", time.Now())
	if _, err := c.Repositories.UpdateStatus(ctx, ns, "full", func(r *v1.ImageRepository) error {
		r.Status.Conditions[0].Status, r.Status.Conditions[0].Reason = metav1.ConditionFalse, v1.TagStoreFullReason
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Unless the failing repository is due for its retry in this pass: the retry's scan tells.
	sum, scans = run(between)
	retried := slices.Contains(scans, "full: "+reconcile.DueRetry)
	reads := int32(1)
	if retried {
		reads = 0
	} else if want := []string{"full: " + reconcile.DueStoreBack}; !slices.Equal(scans, want) {
		t.Errorf("scan requests %v, want %v", scans, want)
	}
	if got := st.reads.Load(); got != reads || sum.StoreRead != !retried {
		t.Errorf("a pass listing a store failure (retried %v) read the keys %d times, want %d (summary %+v)", retried, got, reads, sum)
	}
	if !deletedStored() || sum.StoreDeleted != 0 {
		t.Errorf("a pass between rounds deleted entries: %+v", sum)
	}

	// A policy that read damaged tags has its repository listed between rounds, and when the
	// store lost the entry (rebuilt after the damage), as not stored.
	if _, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
		Spec:       v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("migrated"), Policy: evaltest.Semver("*")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies.UpdateStatus(ctx, ns, "reader", func(p *v1.ImagePolicy) error {
		p.Status.ObservedGeneration = p.Generation
		p.Status.Conditions = []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: v1.TagStoreDamagedReason, Message: "tag store was rebuilt", LastTransitionTime: metav1.Now()}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, scans = run(between)
	if !slices.Contains(scans, "migrated: "+reconcile.DueNotStored) || !deletedStored() {
		t.Errorf("scan requests %v after a policy read damaged tags, deleted entry kept %v; want migrated: %s",
			scans, deletedStored(), reconcile.DueNotStored)
	}
	reads = st.reads.Load()

	// A round finds the repository whose tags are not stored and loses the deleted entry.
	sum, scans = run(round)
	scans = slices.DeleteFunc(scans, func(n string) bool { return strings.HasPrefix(n, "full: ") })
	if want := []string{"migrated: " + reconcile.DueNotStored}; !slices.Equal(scans, want) {
		t.Errorf("scan requests of a store round %v, want %v", scans, want)
	}
	if got := st.reads.Load(); got != reads+1 || deletedStored() || sum.StoreDeleted != 1 {
		t.Errorf("a store round: %d reads in all, deleted entry kept %v, summary %+v", got, deletedStored(), sum)
	}
}
