package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// keepFinalizer stands for the finalizer of some other controller.
const keepFinalizer = "example.com/keep"

// inProcess delivers the cron reconciler's requests about one namespace straight to a call, as
// the functions would receive them, and records them.
type inProcess struct {
	ns string
	do func(ctx context.Context, namespace, name string) error

	mu  sync.Mutex
	got []string
}

func (d *inProcess) Send(ctx context.Context, _, _ string, data any) error {
	ref := data.(events.ObjectRef)
	if ref.Namespace != d.ns {
		return nil // another test's objects
	}
	d.mu.Lock()
	d.got = append(d.got, ref.Name+": "+ref.Reason)
	d.mu.Unlock()
	return d.do(ctx, ref.Namespace, ref.Name)
}

// take returns what was delivered since the last call, sorted.
func (d *inProcess) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.got
	d.got = nil
	slices.Sort(got)
	return got
}

// fluxRepository writes the status Flux's image-reflector-controller leaves on a repository it
// scanned: its own revision form (an Adler-32 checksum), its Ready message, conditions with
// observed generations and transition times.
func fluxRepository(t *testing.T, f *identityFixture, name string) {
	t.Helper()
	_, err := f.Kube.Repositories.UpdateStatus(context.Background(), f.NS, name, func(r *v1.ImageRepository) error {
		canonical, err := reconcile.RepositoryIdentity(r)
		if err != nil {
			return err
		}
		r.Status = v1.ImageRepositoryStatus{
			ObservedGeneration:    r.Generation,
			CanonicalImageName:    canonical.Image,
			ObservedExclusionList: r.GetExclusionList(),
			LastScanResult: &v1.ScanResult{Revision: "1530595413", TagCount: 1,
				ScanTime: metav1.NewTime(time.Now().Add(-time.Minute)), LatestTags: []string{"1.0.0"}},
			Conditions: []metav1.Condition{{
				Type: v1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1.SucceededReason,
				Message:            "successful scan: found 1 tags with checksum 1530595413",
				ObservedGeneration: r.Generation, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour)),
			}},
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fluxPolicy creates an ImagePolicy with finalizers and the status Flux's controller leaves on a
// policy it resolved to tag 1.0.0 of image.
func fluxPolicy(t *testing.T, f *identityFixture, name, image string, finalizers ...string) {
	t.Helper()
	ctx := context.Background()
	_, err := f.Kube.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.NS, Name: name, Finalizers: finalizers},
		Spec:       v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo(name), Policy: evaltest.Semver(">=1.0.0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Kube.Policies.UpdateStatus(ctx, f.NS, name, func(p *v1.ImagePolicy) error {
		p.Status = v1.ImagePolicyStatus{
			LatestRef:          &v1.ImageRef{Name: image, Tag: "1.0.0"},
			ObservedGeneration: p.Generation,
			Conditions: []metav1.Condition{{
				Type: v1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1.SucceededReason,
				Message:            "Latest image tag for " + image + " resolved to 1.0.0",
				ObservedGeneration: p.Generation, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour)),
			}},
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFinalizerIntegrationFluxObjects takes over ImageRepositories and ImagePolicies as Flux's
// controller leaves them, holding its finalizer and a status of its own, with real scans of a
// real registry, a real tag store and a real apiserver. reflector reconciles them as its own,
// leaving the finalizer alone; once they are deleted, the cron reconciler finds them due and
// the scanner and the evaluator remove Flux's finalizer, and only that one, after the scanner
// took the repository's tags out of the store.
func TestFinalizerIntegrationFluxObjects(t *testing.T) {
	f := newIdentityFixture(t)
	f.scanner.Log = slog.New(slog.NewJSONHandler(f.Logs, nil))
	f.scanner.Recorder = f.Rec
	ctx := context.Background()
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "1.0.0", "1.1.0")
	image := reg.Image("app")

	// "solo" holds only Flux's finalizer, "shared" another controller's too.
	holders := map[string][]string{"solo": {v1.ImageFinalizer}, "shared": {keepFinalizer, v1.ImageFinalizer}}
	for _, name := range []string{"solo", "shared"} {
		f.Repo(t, f.NS, name, image, func(r *v1.ImageRepository) {
			r.Spec.Insecure = true
			r.Finalizers = holders[name]
		})
		fluxRepository(t, f, name)
		fluxPolicy(t, f, name, image, holders[name]...)
	}

	// Reconciled as reflector's own: the status keeps Flux's shape, the finalizer stays.
	for _, name := range []string{"solo", "shared"} {
		if out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.NS, Name: name}); err != nil || out.Failure != "" || out.TagCount != 2 || !out.Changed {
			t.Fatalf("scan of %s: %+v, %v", name, out, err)
		}
		r, err := f.Kube.Repositories.Get(ctx, f.NS, name)
		if err != nil {
			t.Fatal(err)
		}
		ready := apimeta.FindStatusCondition(r.Status.Conditions, v1.ReadyCondition)
		if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != v1.SucceededReason ||
			r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != 2 ||
			!slices.Equal(r.Status.LastScanResult.LatestTags, []string{"1.1.0", "1.0.0"}) || len(r.Status.Conditions) != 1 {
			t.Errorf("%s after a scan: %+v", name, r.Status)
		}
		if !slices.Equal(r.Finalizers, holders[name]) {
			t.Errorf("%s: finalizers %v after a scan, want %v", name, r.Finalizers, holders[name])
		}

		out, err := f.Ev.Evaluate(ctx, f.NS, name)
		want := &v1.ImageRef{Name: image, Tag: "1.1.0"}
		if err != nil || out.Result != reconcile.PolicySucceeded || !evaltest.SameRef(out.Latest, want) || !out.Changed {
			t.Fatalf("evaluation of %s: %+v, %v", name, out, err)
		}
		p := f.Get(t, f.NS, name)
		evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "Latest image tag for '" + image + "' updated from 1.0.0 to 1.1.0", Stalled: false})
		if prev := p.Status.ObservedPreviousRef; prev == nil || prev.Tag != "1.0.0" {
			t.Errorf("%s: observedPreviousRef %s, want Flux's latestRef", name, evaltest.RefString(prev))
		}
		if !slices.Equal(p.Finalizers, holders[name]) {
			t.Errorf("%s: finalizers %v after an evaluation, want %v", name, p.Finalizers, holders[name])
		}
	}

	// "successor": a deleted repository whose store key already holds the tags of a later
	// object of the same name keeps those tags.
	f.Repo(t, f.NS, "successor", image, func(r *v1.ImageRepository) {
		r.Spec.Insecure = true
		r.Finalizers = []string{v1.ImageFinalizer}
	})
	later := store.Identity{UID: "later-object", Image: f.IDs[reconcile.StoreKey(f.NS, "successor")].Image}
	if _, _, err := f.Writer.Put(ctx, reconcile.StoreKey(f.NS, "successor"), later, []string{"9.9.9"}, time.Now()); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"solo", "shared", "successor"} {
		if err := f.Kube.Repositories.Delete(ctx, f.NS, name); err != nil {
			t.Fatal(err)
		}
		if name != "successor" {
			if err := f.Kube.Policies.Delete(ctx, f.NS, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Flux's finalizer holds them until someone removes it.
	if _, err := f.Kube.Repositories.Get(ctx, f.NS, "solo"); err != nil {
		t.Fatalf("a repository holding Flux's finalizer is gone before reflector saw it: %v", err)
	}

	scans := &inProcess{ns: f.NS, do: func(ctx context.Context, ns, name string) error {
		_, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: ns, Name: name})
		return err
	}}
	evaluations := &inProcess{ns: f.NS, do: func(ctx context.Context, ns, name string) error {
		_, err := f.Ev.Evaluate(ctx, ns, name)
		return err
	}}
	pass := &reconcile.Pass{Kube: f.Kube, Scan: scans, Policy: evaluations, Period: time.Minute}
	if sum, err := pass.Run(ctx); err != nil || sum.Failed != 0 {
		t.Fatalf("pass: %+v, %v", sum, err)
	}
	due := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, n+": "+reconcile.DueFinalizer)
		}
		return out
	}
	if got, want := scans.take(), due("shared", "solo", "successor"); !slices.Equal(got, want) {
		t.Errorf("scans dispatched %q, want %q", got, want)
	}
	if got, want := evaluations.take(), due("shared", "solo"); !slices.Equal(got, want) {
		t.Errorf("evaluations dispatched %q, want %q", got, want)
	}

	for _, name := range []string{"solo", "successor"} {
		if _, err := f.Kube.Repositories.Get(ctx, f.NS, name); !apierrors.IsNotFound(err) {
			t.Errorf("ImageRepository %s after the pass: %v, want it gone", name, err)
		}
	}
	if _, err := f.Kube.Policies.Get(ctx, f.NS, "solo"); !apierrors.IsNotFound(err) {
		t.Errorf("ImagePolicy solo after the pass: %v, want it gone", err)
	}
	r, err := f.Kube.Repositories.Get(ctx, f.NS, "shared")
	if err != nil || !slices.Equal(r.Finalizers, []string{keepFinalizer}) {
		t.Errorf("ImageRepository shared after the pass: finalizers %v, %v; want only %s", r.Finalizers, err, keepFinalizer)
	}
	if p := f.Get(t, f.NS, "shared"); !slices.Equal(p.Finalizers, []string{keepFinalizer}) {
		t.Errorf("ImagePolicy shared after the pass: finalizers %v, want only %s", p.Finalizers, keepFinalizer)
	}

	// The deleted repositories' tags are gone from the store; a later object's are not.
	for _, name := range []string{"solo", "shared"} {
		if _, err := f.Writer.Get(ctx, reconcile.StoreKey(f.NS, name), f.IDs[reconcile.StoreKey(f.NS, name)]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("store entry of %s: %v, want none", name, err)
		}
	}
	if e, err := f.Writer.Get(ctx, reconcile.StoreKey(f.NS, "successor"), later); err != nil || !slices.Equal(e.Tags, []string{"9.9.9"}) {
		t.Errorf("store entry of a later object named successor: %+v, %v; want it kept", e, err)
	}

	// What waits for another controller is not due again.
	if _, err := pass.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := append(scans.take(), evaluations.take()...); len(got) != 0 {
		t.Errorf("dispatched again: %q", got)
	}
	// The removal is logged, not announced as an Event.
	if n := strings.Count(f.Logs.String(), fmt.Sprintf(`"finalizer_removed":%q`, v1.ImageFinalizer)); n != 5 {
		t.Errorf("%d log lines tell of a removal, want 5: %s", n, f.Logs)
	}
	list, err := f.Kube.Events.List(ctx, f.NS, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Reason != v1.SucceededReason {
			t.Errorf("Event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
}
