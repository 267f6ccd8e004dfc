package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// scanFixture is a real apiserver, registry and Badger store, and a Scanner over them whose
// TagsChanged events go to a real CloudEvents sink.
type scanFixture struct {
	ns      string
	kube    *kube.Client
	reg     *testenv.Registry
	store   *store.Store
	sink    *sink
	scanner *reconcile.Scanner
}

func newScanFixture(t *testing.T) *scanFixture {
	t.Helper()
	env := testenv.Kube(t)
	c := env.Client(t)
	f := &scanFixture{ns: env.Namespace(t), kube: c, reg: testenv.NewRegistry(t), store: store.New(t.TempDir())}
	t.Cleanup(func() { f.store.Close() })
	f.sink = newSink(t)
	f.scanner = &reconcile.Scanner{Kube: c, Registry: registry.New(registry.WithRateLimit(0, 0)), Store: f.store, Sink: f.sink.sender(t)}
	return f
}

func (f *scanFixture) createRepo(t *testing.T, name string, mutate ...func(*v1.ImageRepository)) *v1.ImageRepository {
	t.Helper()
	r := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: v1.ImageRepositorySpec{
			Image:    f.reg.Image(name),
			Interval: metav1.Duration{Duration: time.Hour},
			Insecure: true,
		},
	}
	for _, m := range mutate {
		m(r)
	}
	created, err := f.kube.Repositories.Create(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func (f *scanFixture) get(t *testing.T, name string) *v1.ImageRepository {
	t.Helper()
	r, err := f.kube.Repositories.Get(context.Background(), f.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// identity returns the identity of the repository name as it is now.
func (f *scanFixture) identity(t *testing.T, name string) store.Identity {
	t.Helper()
	return evaltest.Identity(t, f.get(t, name))
}

func (f *scanFixture) tagListings() int {
	n := 0
	for _, r := range f.reg.Requests() {
		if strings.Contains(r.URI, "/tags/list") {
			n++
		}
	}
	return n
}

func TestScanIntegrationFullThenIncremental(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	f.reg.Push(t, "app", "1.0.0", "1.1.0", "sha256-abc.sig")
	f.createRepo(t, "app")

	out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Incremental || out.TagCount != 2 || !out.Changed {
		t.Fatalf("first scan: %+v", out)
	}
	repo := f.get(t, "app")
	st := repo.Status
	if st.LastScanResult == nil || st.LastScanResult.TagCount != 2 ||
		fmt.Sprint(st.LastScanResult.LatestTags) != "[1.1.0 1.0.0]" ||
		st.LastScanResult.Revision != store.RevisionOf([]string{"1.0.0", "1.1.0"}) {
		t.Errorf("lastScanResult = %+v", st.LastScanResult)
	}
	if st.CanonicalImageName != f.reg.Image("app") || fmt.Sprint(st.ObservedExclusionList) != `[^.*\.sig$]` ||
		st.ObservedGeneration != repo.Generation {
		t.Errorf("status = %+v", st)
	}
	ready := apimeta.FindStatusCondition(st.Conditions, v1.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != v1.SucceededReason ||
		ready.Message != "successful scan: found 2 tags" {
		t.Errorf("Ready = %+v", ready)
	}
	if got := f.sink.names(f.ns); fmt.Sprint(got) != "[app: ]" {
		t.Errorf("tags-changed events: %q", got)
	}
	firstScan := st.LastScanResult.ScanTime

	// A push of 1.2.0, announced by a webhook that set the annotation first.
	f.reg.Push(t, "app", "1.2.0")
	token := testenv.RequestToken(time.Now())
	if _, err := f.kube.Repositories.RequestReconcile(ctx, f.ns, "app", token); err != nil {
		t.Fatal(err)
	}
	before := len(f.reg.Requests())
	out, err = f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{"1.2.0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Incremental || out.TagCount != 3 || !out.Changed {
		t.Fatalf("push scan: %+v", out)
	}
	if n := len(f.reg.Requests()) - before; n != 1 {
		t.Errorf("an incremental scan sent %d registry requests, want 1: the HEAD, in the session of the scan before", n)
	}
	st = f.get(t, "app").Status
	if st.LastScanResult.TagCount != 3 || st.LastScanResult.LatestTags[0] != "1.2.0" ||
		st.LastHandledReconcileAt != token || !st.LastScanResult.ScanTime.Equal(&firstScan) {
		t.Errorf("after the push: %+v", st)
	}

	// A payload that names a tag the registry does not have is not trusted: a full listing
	// decides, and nothing changes.
	listings := f.tagListings()
	out, err = f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{"9.9.9"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Incremental || out.TagCount != 3 || out.Changed || f.tagListings() != listings+1 {
		t.Errorf("forged tag: %+v, %d listings", out, f.tagListings()-listings)
	}
	entry, err := f.store.Get(ctx, reconcile.StoreKey(f.ns, "app"), f.identity(t, "app"))
	if err != nil || fmt.Sprint(entry.Tags) != "[1.0.0 1.1.0 1.2.0]" {
		t.Errorf("stored %v, %v", entry.Tags, err)
	}
}

// TestScanIntegrationListingRacesThePush: a registry may announce a push before its listing
// shows it (CNCF distribution 2.8 writes the tag after it notifies, and does not list a new
// repository at all until then). A listing done for a request that names pushed tags confirms
// those it misses, whatever the listing is done for: the first scan of a repository, a stored
// list that is gone, or a repository the registry does not list yet. A named tag that the
// registry does not have still fails a listing it cannot be added to.
func TestScanIntegrationListingRacesThePush(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	// listing answers the next tag listing with tags, a JSON array, as a registry that has not
	// written the pushed tag yet does.
	listing := func(tags string) testenv.RegistryFault {
		return testenv.RegistryFault{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"name":"app","tags":` + tags + `}`}.On("/tags/list")
	}
	stored := func(name string) string {
		t.Helper()
		entry, err := f.store.Get(ctx, reconcile.StoreKey(f.ns, name), f.identity(t, name))
		if err != nil {
			return err.Error()
		}
		return fmt.Sprint(entry.Tags)
	}

	// The first push of a repository never scanned, listed before it shows the tag.
	f.reg.Push(t, "app", "1.0.0")
	f.createRepo(t, "app")
	f.reg.Inject(listing(`[]`))
	out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{"1.0.0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Failure != "" || out.Listing != reconcile.ListingRequested || out.TagCount != 1 || !out.Changed {
		t.Errorf("first push, stale listing: %+v", out)
	}
	if got := stored("app"); got != "[1.0.0]" {
		t.Errorf("first push, stale listing: stored %s", got)
	}

	// The stored list is gone, and the listing done instead misses the pushed tag.
	f.reg.Push(t, "app", "1.1.0")
	if _, err := f.store.Delete(ctx, reconcile.StoreKey(f.ns, "app")); err != nil {
		t.Fatal(err)
	}
	f.reg.Inject(listing(`["1.0.0"]`))
	out, err = f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{"1.1.0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Failure != "" || out.Listing != reconcile.ListingUnconfirmed || out.TagCount != 2 {
		t.Errorf("stored list gone, stale listing: %+v", out)
	}
	if got := stored("app"); got != "[1.0.0 1.1.0]" {
		t.Errorf("stored list gone, stale listing: stored %s", got)
	}

	// The first push of a repository that the registry does not list yet: NAME_UNKNOWN.
	f.reg.Push(t, "new", "0.1.0")
	f.createRepo(t, "new")
	f.reg.Inject(testenv.RegistryNotFound().On("/tags/list"))
	out, err = f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "new", Hint: &reconcile.Hint{Tags: []string{"0.1.0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Failure != "" || out.TagCount != 1 {
		t.Errorf("first push, repository not listed: %+v", out)
	}
	if got := stored("new"); got != "[0.1.0]" {
		t.Errorf("first push, repository not listed: stored %s", got)
	}
	st := f.get(t, "new").Status
	if !apimeta.IsStatusConditionTrue(st.Conditions, v1.ReadyCondition) || st.LastScanResult == nil || st.LastScanResult.TagCount != 1 {
		t.Errorf("first push, repository not listed: status %+v", st)
	}

	// A repository the registry does not know, named with a tag it does not have: the scan
	// fails with the listing's error after a bounded number of requests, and stores nothing.
	f.createRepo(t, "ghost")
	before := len(f.reg.Requests())
	out, err = f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "ghost", Hint: &reconcile.Hint{Tags: []string{"1.0.0", "2.0.0", "3.0.0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Failure == "" || out.Changed {
		t.Errorf("unknown repository: %+v", out)
	}
	ready := apimeta.FindStatusCondition(f.get(t, "ghost").Status.Conditions, v1.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "NAME_UNKNOWN") {
		t.Errorf("unknown repository: Ready = %+v", ready)
	}
	if _, err := f.store.Get(ctx, reconcile.StoreKey(f.ns, "ghost"), f.identity(t, "ghost")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown repository: the store holds an entry (%v)", err)
	}
	heads := 0
	for _, r := range f.reg.Requests()[before:] {
		if r.Method == http.MethodHead {
			heads++
		}
	}
	if heads == 0 || heads > 11 {
		t.Errorf("unknown repository: %d HEAD requests, want the confirmation of one tag (at most 11)", heads)
	}
}

// TestScanIntegrationSignaturePushIsAnnounced pushes signatures of an image after it was
// scanned, as cosign does in its legacy .sig tag, which the default exclusion list drops, and
// again as a second referrer that rewrites the referrers tag schema's tag already stored: neither
// changes the stored list, and the scan of each push names the signed image in its TagsChanged
// event all the same, so that a policy that refused it verifies it again.
func TestScanIntegrationSignaturePushIsAnnounced(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	d := f.reg.Push(t, "app", "1.0.0")
	schema := strings.Replace(d, ":", "-", 1)
	f.reg.Push(t, "app", schema)
	f.createRepo(t, "app")
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{schema + ".sig", schema} {
		f.reg.Push(t, "app", tag)
		out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{tag}}})
		if err != nil {
			t.Fatal(err)
		}
		if !out.Incremental || out.Changed || out.TagCount != 2 || out.Attached != 1 {
			t.Errorf("scan of the push of %s: %+v", tag, out)
		}
		last := f.sink.lastChanged(t)
		if last.Name != "app" || fmt.Sprint(last.Attached) != "["+d+"]" || last.Delta != nil {
			t.Errorf("after the push of %s, TagsChanged %+v; want one naming %s and no delta", tag, last, d)
		}
	}

	// A push of an image names nothing.
	f.reg.Push(t, "app", "1.1.0")
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{"1.1.0"}}}); err != nil {
		t.Fatal(err)
	}
	if last := f.sink.lastChanged(t); last.Attached != nil || last.Delta == nil {
		t.Errorf("after the push of 1.1.0, TagsChanged %+v; want its delta and no image named", last)
	}
}

func TestScanIntegrationFailuresKeepWhatWasStored(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	f.reg.Push(t, "app", "1.0.0")
	f.createRepo(t, "app")
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	good := f.get(t, "app").Status.LastScanResult

	f.reg.Push(t, "app", "2.0.0")
	f.reg.Inject(testenv.RegistryUnauthorized().On("/tags/list"))
	out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Failure != v1.AuthenticationFailedReason || out.Stalled {
		t.Errorf("outcome %+v", out)
	}
	st := f.get(t, "app").Status
	ready := apimeta.FindStatusCondition(st.Conditions, v1.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1.AuthenticationFailedReason ||
		!strings.Contains(ready.Message, "UNAUTHORIZED") {
		t.Errorf("Ready = %+v", ready)
	}
	if !apimeta.IsStatusConditionTrue(st.Conditions, v1.ReconcilingCondition) {
		t.Error("a failed scan is not marked Reconciling for retry")
	}
	if st.LastScanResult == nil || st.LastScanResult.Revision != good.Revision {
		t.Errorf("a failed scan changed lastScanResult to %+v", st.LastScanResult)
	}
	entry, err := f.store.Get(ctx, reconcile.StoreKey(f.ns, "app"), f.identity(t, "app"))
	if err != nil || fmt.Sprint(entry.Tags) != "[1.0.0]" {
		t.Errorf("a failed scan changed the store: %v, %v", entry.Tags, err)
	}

	// The next successful scan clears the failure.
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	st = f.get(t, "app").Status
	if !apimeta.IsStatusConditionTrue(st.Conditions, v1.ReadyCondition) || apimeta.FindStatusCondition(st.Conditions, v1.ReconcilingCondition) != nil {
		t.Errorf("conditions after recovery: %+v", st.Conditions)
	}
}

// TestScanIntegrationStoreFailureIsReadyFalse: a scan whose tags could not be stored never says
// it succeeded. Its status is Ready=False with the store's reason, lastScanResult stays, and the
// error is returned so that the request is delivered again; once the store works, a scan succeeds.
func TestScanIntegrationStoreFailureIsReadyFalse(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	f.reg.Push(t, "app", "1.0.0")
	f.createRepo(t, "app")
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	good := f.get(t, "app").Status.LastScanResult

	// A store directory that cannot be created: a file stands where it should be.
	blocked := filepath.Join(t.TempDir(), "store")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	broken := store.New(blocked)
	defer broken.Close()
	scanner := &reconcile.Scanner{Kube: f.kube, Registry: registry.New(registry.WithRateLimit(0, 0)), Store: broken, Sink: f.sink.sender(t)}
	f.reg.Push(t, "app", "1.1.0")
	out, err := scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"})
	if err == nil || out.Failure != v1.ReadOperationFailedReason {
		t.Fatalf("scan into a broken store: %+v, %v; want ReadOperationFailed and an error", out, err)
	}
	st := f.get(t, "app").Status
	ready := apimeta.FindStatusCondition(st.Conditions, v1.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1.ReadOperationFailedReason ||
		!strings.Contains(ready.Message, "storing the tags") {
		t.Errorf("Ready after a scan whose tags were not stored = %+v", ready)
	}
	if st.LastScanResult == nil || st.LastScanResult.Revision != good.Revision {
		t.Errorf("a scan whose tags were not stored changed lastScanResult to %+v", st.LastScanResult)
	}

	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if st := f.get(t, "app").Status; !apimeta.IsStatusConditionTrue(st.Conditions, v1.ReadyCondition) || st.LastScanResult.TagCount != 2 {
		t.Errorf("after the store works again: %+v", st)
	}
}

func TestScanIntegrationSpecProblems(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	f.createRepo(t, "tagged", func(r *v1.ImageRepository) { r.Spec.Image += ":v1" })
	out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "tagged"})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Stalled || out.Failure != v1.ImageURLInvalidReason {
		t.Errorf("outcome %+v", out)
	}
	st := f.get(t, "tagged").Status
	stalled := apimeta.FindStatusCondition(st.Conditions, v1.StalledCondition)
	if stalled == nil || stalled.Reason != v1.ImageURLInvalidReason || !strings.Contains(stalled.Message, "should not contain a tag") {
		t.Errorf("Stalled = %+v", stalled)
	}
	if st.LastScanResult != nil {
		t.Errorf("lastScanResult %+v", st.LastScanResult)
	}

	f.createRepo(t, "cloud", func(r *v1.ImageRepository) { r.Spec.Provider = v1.AWSProvider })
	if out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "cloud"}); err != nil || !out.Stalled || out.Failure != v1.UnsupportedProviderReason {
		t.Errorf("aws provider: %+v, %v", out, err)
	}

	// Object-level workload identity is behind a feature gate, off by default, as in Flux.
	f.createRepo(t, "gated", func(r *v1.ImageRepository) {
		r.Spec.Provider = v1.AWSProvider
		r.Spec.Image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/app"
		r.Spec.Insecure = false
		r.Spec.ServiceAccountName = "puller"
	})
	if out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "gated"}); err != nil || !out.Stalled || out.Failure != v1.FeatureGateDisabledReason {
		t.Errorf("serviceAccountName without the gate: %+v, %v", out, err)
	}
	gated := apimeta.FindStatusCondition(f.get(t, "gated").Status.Conditions, v1.StalledCondition)
	if gated == nil || gated.Reason != v1.FeatureGateDisabledReason || !strings.Contains(gated.Message, "REFLECTOR_FEATURE_GATES=ObjectLevelWorkloadIdentity=true") {
		t.Errorf("Stalled = %+v", gated)
	}

	f.reg.Push(t, "paused", "1.0.0")
	f.createRepo(t, "paused", func(r *v1.ImageRepository) { r.Spec.Suspend = true })
	if out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "paused"}); err != nil || out.Skipped != reconcile.SkippedSuspended {
		t.Errorf("suspended: %+v, %v", out, err)
	}
	if f.get(t, "paused").Status.LastScanResult != nil || f.tagListings() != 0 {
		t.Error("a suspended repository was scanned")
	}
	// A reconcile request on a suspended repository is acknowledged, as Flux does, and nothing
	// else happens.
	if _, err := f.kube.Repositories.RequestReconcile(ctx, f.ns, "paused", "while-paused"); err != nil {
		t.Fatal(err)
	}
	if out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "paused"}); err != nil || out.Skipped != reconcile.SkippedSuspended {
		t.Errorf("suspended with a request: %+v, %v", out, err)
	}
	if st := f.get(t, "paused").Status; st.LastHandledReconcileAt != "while-paused" || st.LastScanResult != nil || len(st.Conditions) != 0 || f.tagListings() != 0 {
		t.Errorf("suspended with a request: status %+v, %d listings", st, f.tagListings())
	}
}

func TestScanIntegrationDeletedRepositoryLosesItsEntry(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	f.reg.Push(t, "gone", "1.0.0")
	gone := evaltest.Identity(t, f.createRepo(t, "gone"))
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	if err := f.kube.Repositories.Delete(ctx, f.ns, "gone"); err != nil {
		t.Fatal(err)
	}
	announced := len(f.sink.names(f.ns))
	out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "gone"})
	if err != nil || out.Skipped != reconcile.SkippedDeleted {
		t.Fatalf("%+v, %v", out, err)
	}
	if _, err := f.store.Get(ctx, reconcile.StoreKey(f.ns, "gone"), gone); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("store entry of a deleted repository: %v", err)
	}
	// The policies hear of it once: a second delivery of the deletion finds no entry.
	if got := f.sink.names(f.ns); len(got) != announced+1 {
		t.Errorf("announced after the deletion: %v, want one more than the %d before", got, announced)
	}
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	if got := f.sink.names(f.ns); len(got) != announced+1 {
		t.Errorf("announced after a second scan of the deleted repository: %v", got)
	}
}

// TestScanIntegrationCoalescing sends 50 concurrent scan requests for one repository: one scan
// runs, the others join at most one follow-up.
func TestScanIntegrationCoalescing(t *testing.T) {
	f := newScanFixture(t)
	f.reg.Push(t, "busy", "1.0.0")
	f.createRepo(t, "busy")
	f.reg.Inject(testenv.RegistrySlow(300 * time.Millisecond).On("/tags/list"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	coalesced := 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := f.scanner.Scan(context.Background(), reconcile.ScanRequest{Namespace: f.ns, Name: "busy"})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if out.Skipped == reconcile.SkippedCoalesced {
				coalesced++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if n := f.tagListings(); n > 2 || n < 1 {
		t.Errorf("50 requests caused %d listings, want 1 or 2", n)
	}
	if coalesced < 48 {
		t.Errorf("%d of 50 requests coalesced", coalesced)
	}
}

// A request joins a collected follow-up scan without a record of its own only when one of the
// requests collected was recorded by a patch sent after the running scan had its object; the
// follow-up then scans the joined request's tag.
func TestScanIntegrationJoin(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	f.reg.Push(t, "join", "1.0.0")
	f.createRepo(t, "join")
	pushed := &reconcile.Hint{Tags: []string{"1.1.0"}}
	if f.scanner.Join(ctx, f.ns, "join", pushed) {
		t.Fatal("joined with no scan running")
	}
	annotate := func(token string) (*v1.ImageRepository, time.Time) {
		t.Helper()
		sent := time.Now()
		obj, err := f.kube.Repositories.RequestReconcile(ctx, f.ns, "join", token)
		if err != nil {
			t.Fatal(err)
		}
		return obj, sent
	}
	coalesced := func(repo *v1.ImageRepository, sent time.Time) {
		t.Helper()
		if out, err := f.scanner.ScanRecorded(ctx, repo, nil, sent); err != nil || out.Skipped != reconcile.SkippedCoalesced {
			t.Fatalf("%+v, %v", out, err)
		}
	}
	release := make(chan struct{})
	f.reg.Inject(testenv.RegistryHeld(release).On("/tags/list"))
	first, firstSent := annotate("first")
	done := make(chan error, 1)
	go func() {
		_, err := f.scanner.ScanRecorded(ctx, first, nil, firstSent)
		done <- err
	}()
	testenv.Eventually(t, 30*time.Second, func() error {
		if f.reg.RequestCount() == 0 {
			return errors.New("the scan has not reached the registry")
		}
		return nil
	})

	// Requests that recorded nothing, or whose patch went out before the running scan had its
	// object, may be the running scan's own: once it writes them handled, nothing would remind
	// the cron reconciler of a joined request.
	if out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Object: first}); err != nil || out.Skipped != reconcile.SkippedCoalesced {
		t.Fatalf("%+v, %v", out, err)
	}
	coalesced(first, firstSent)
	if f.scanner.Join(ctx, f.ns, "join", pushed) {
		t.Error("joined a follow-up with no request recorded after the running scan read the object")
	}

	// A request recorded after the running scan had its object keeps the object unhandled
	// until the follow-up scan.
	coalesced(annotate("second"))
	f.reg.Push(t, "join", "1.1.0")
	if !f.scanner.Join(ctx, f.ns, "join", pushed) {
		t.Fatal("did not join a follow-up with a request recorded after the running scan's read")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	repo := f.get(t, "join")
	if got := repo.Status.LastHandledReconcileAt; got != "second" {
		t.Errorf("lastHandledReconcileAt %q, want the follow-up's second", got)
	}
	entry, err := f.store.Get(ctx, reconcile.StoreKey(f.ns, "join"), evaltest.Identity(t, repo))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(entry.Tags, "1.1.0") {
		t.Errorf("stored tags %v lack the joined request's 1.1.0", entry.Tags)
	}
	if f.scanner.Join(ctx, f.ns, "join", pushed) {
		t.Error("joined after every scan ended")
	}
}

// cancelOnPatch returns a client of env's apiserver that, when a PATCH whose path ends in
// suffix goes out, cancels the context that *cancel holds before sending it: the caller gives
// up the moment the scanner writes what it did.
func cancelOnPatch(t *testing.T, env *testenv.Env, suffix string, cancel *context.CancelFunc) *kube.Client {
	t.Helper()
	return env.ClientSeeing(t, nil, func(req *http.Request) {
		if req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, suffix) {
			(*cancel)()
		}
	})
}

// TestScanIntegrationCallerGivesUpWhileWriting: a scan whose caller gives up once the registry
// has answered and the tags are stored still records them in the status, and a scan of a
// repository being deleted whose caller gives up once the tags are gone still removes Flux's
// finalizer. The request that started the scan may end (a function's deadline, a client that
// disconnected), but the work is done and must not be lost with it.
func TestScanIntegrationCallerGivesUpWhileWriting(t *testing.T) {
	f := newScanFixture(t)
	env := testenv.Kube(t)
	f.reg.Push(t, "app", "1.0.0", "1.1.0")
	f.createRepo(t, "app")
	f.createRepo(t, "gone", func(r *v1.ImageRepository) { r.Finalizers = []string{v1.ImageFinalizer} })

	t.Run("status", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		scanner := &reconcile.Scanner{Kube: cancelOnPatch(t, env, "/app/status", &cancel),
			Registry: f.scanner.Registry, Store: f.store}
		out, err := scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if ctx.Err() == nil {
			t.Fatal("the caller did not give up during the status write")
		}
		st := f.get(t, "app").Status
		if st.LastScanResult == nil || st.LastScanResult.TagCount != 2 || st.LastScanResult.Revision != out.Revision ||
			!apimeta.IsStatusConditionTrue(st.Conditions, v1.ReadyCondition) {
			t.Errorf("status after a scan whose caller gave up: %+v", st)
		}
	})

	t.Run("finalizer", func(t *testing.T) {
		if err := f.kube.Repositories.Delete(context.Background(), f.ns, "gone"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		scanner := &reconcile.Scanner{Kube: cancelOnPatch(t, env, "/gone", &cancel),
			Registry: f.scanner.Registry, Store: f.store}
		out, err := scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "gone"})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if ctx.Err() == nil || !out.Finalized {
			t.Fatalf("scan of a repository being deleted: %+v, caller gave up: %v", out, ctx.Err() != nil)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			if _, err := f.kube.Repositories.Get(context.Background(), f.ns, "gone"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the repository is not deleted once its finalizer is removed: %v", err)
			}
			return nil
		})
	})
}
