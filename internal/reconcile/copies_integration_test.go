package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/testenv"
)

// With the ImageRepositories in watched copies (Evaluator.Repositories), a push's delta advances
// the policies of the repository's own namespace without reading the repository, while a
// policy of another namespace still reads it, for its accessFrom.
func TestAdvanceIntegrationFromWatchedRepository(t *testing.T) {
	f := newEvalFixture(t)
	const image = "ghcr.io/org/app"
	other := f.Env.Namespace(t)
	f.Repo(t, f.NS, "app", image, func(r *v1.ImageRepository) {
		r.Spec.AccessFrom = &v1.AccessFrom{NamespaceSelectors: []v1.NamespaceSelector{{MatchLabels: map[string]string{}}}}
	})
	f.Put(t, f.NS, "app", "1.0.0", "1.2.0")
	spec := v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver(">=1.0.0"), DigestReflectionPolicy: v1.ReflectNever}
	f.Policy(t, f.NS, "own", spec)
	spec.ImageRepositoryRef.Namespace = f.NS
	f.Policy(t, other, "cross", spec)
	for _, p := range []struct{ ns, name string }{{f.NS, "own"}, {other, "cross"}} {
		if out := f.Evaluate(t, p.ns, p.name); out.Result != reconcile.PolicySucceeded {
			t.Fatalf("first evaluation of %s: %+v", p.name, out)
		}
	}
	f.Cached(t, f.NS+"/own", other+"/cross")

	repos := kube.NewCache[*v1.ImageRepository](f.Kube.Repositories, nil)
	repos.Start(t.Context())
	t.Cleanup(repos.Stop)
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, ok := repos.Get(f.NS, "app"); !ok {
			return errors.New("the copies do not hold the repository yet")
		}
		return nil
	})
	pols := kube.NewCache(f.Kube.Policies, map[string]func(*v1.ImagePolicy) string{
		reconcile.RepositoryIndex: reconcile.PolicyRepository,
	})
	pols.Start(t.Context())
	t.Cleanup(pols.Stop)
	testenv.Eventually(t, 30*time.Second, func() error {
		if got, ok := pols.Indexed(reconcile.RepositoryIndex, f.NS+"/app"); !ok || len(got) != 2 {
			return errors.New("the copies do not hold both policies yet")
		}
		return nil
	})
	ev := f.Storeless(t)
	ev.Repositories, ev.Policies = repos, pols
	reads, lists := countRepositoryReads(t, f, ev)

	c := f.add(t, f.NS, "app", "1.3.0")
	outs, err := ev.EvaluateChange(context.Background(), c)
	if err != nil || len(outs) != 2 {
		t.Fatalf("EvaluateChange = %+v, %v", outs, err)
	}
	for _, p := range []struct{ ns, name string }{{f.NS, "own"}, {other, "cross"}} {
		if got := f.Get(t, p.ns, p.name); got.Status.LatestRef.Tag != "1.3.0" || got.Status.ObservedTagsRevision != c.Revision {
			t.Errorf("%s: latestRef %s at %q, want 1.3.0 at %q", p.name, evaltest.RefString(got.Status.LatestRef), got.Status.ObservedTagsRevision, c.Revision)
		}
	}
	// The policy of another namespace read the repository once; its own namespace's did not.
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads of the repository, want 1 (the policy of another namespace's)", n)
	}
	if n := lists.Load(); n != 0 {
		t.Errorf("the push's event listed the ImagePolicies %d times, want 0", n)
	}
}

// A watched copy a moment behind an edit of the repository's image can advance a policy by the
// old identity's delta; the edit's own scan, which lists the tags for the new identity and
// announces them without a delta, brings latestRef to the new image: the race never ends with
// an outcome of the old spec.
func TestAdvanceIntegrationStaleCopyHeals(t *testing.T) {
	f := newEvalFixture(t)
	const oldImage, newImage = "ghcr.io/org/old", "ghcr.io/org/new"
	before := f.Repo(t, f.NS, "moved", oldImage)
	f.Put(t, f.NS, "moved", "1.0.0", "1.2.0")
	f.Policy(t, f.NS, "moved", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("moved"), Policy: evaltest.Semver(">=1.0.0"),
		DigestReflectionPolicy: v1.ReflectNever})
	if out := f.Evaluate(t, f.NS, "moved"); out.Result != reconcile.PolicySucceeded {
		t.Fatalf("first evaluation: %+v", out)
	}
	f.Cached(t, f.NS+"/moved")

	// The scan of a push read the repository before its image was edited.
	c := f.add(t, f.NS, "moved", "1.3.0")
	edited := f.getRepo(t, f.NS, "moved")
	edited.Spec.Image = newImage
	edited, err := f.Kube.Repositories.Update(context.Background(), edited)
	if err != nil {
		t.Fatal(err)
	}
	ev := f.Storeless(t)
	ev.Repositories = staleCopies{before}
	if _, err := ev.EvaluateChange(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(t, f.NS, "moved").Status.LatestRef; got.Name != oldImage || got.Tag != "1.3.0" {
		t.Fatalf("the stale copy's advance: latestRef %s, want %s:1.3.0", evaltest.RefString(got), oldImage)
	}

	// The edit's scan: the tags of the new image, listed for its identity, announced without a
	// delta.
	f.IDs[reconcile.StoreKey(f.NS, "moved")] = evaltest.Identity(t, edited)
	f.Put(t, f.NS, "moved", "2.0.0", "2.1.0")
	f.Cached(t, f.NS+"/moved")
	healed := f.Evaluator(t)
	healed.Repositories = staleCopies{before}
	rev := f.revision(t, f.NS, "moved")
	if _, err := healed.EvaluateChange(context.Background(), events.TagsChanged{Namespace: f.NS, Name: "moved", Revision: rev}); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(t, f.NS, "moved").Status.LatestRef; got.Name != newImage || got.Tag != "2.1.0" {
		t.Fatalf("after the edit's scan: latestRef %s, want %s:2.1.0", evaltest.RefString(got), newImage)
	}
}

// staleCopies answers every repository with repo, as watched copies that have not yet seen an
// edit would.
type staleCopies struct{ repo *v1.ImageRepository }

func (s staleCopies) Get(namespace, name string) (*v1.ImageRepository, bool) {
	if namespace != s.repo.Namespace || name != s.repo.Name {
		return nil, false
	}
	return s.repo.DeepCopy(), true
}

func (s staleCopies) Range(namespace string, each func(*v1.ImageRepository)) bool {
	if namespace == "" || namespace == s.repo.Namespace {
		each(s.repo)
	}
	return true
}

// countRepositoryReads gives ev a client of f's apiserver that counts its reads of one
// ImageRepository and its lists of ImagePolicies.
func countRepositoryReads(t testing.TB, f *evalFixture, ev *reconcile.Evaluator) (reads, lists *atomic.Int64) {
	t.Helper()
	reads, lists = &atomic.Int64{}, &atomic.Int64{}
	ev.Kube = f.Env.ClientSeeing(t, nil, func(req *http.Request) {
		switch {
		case req.Method != http.MethodGet:
		case strings.Contains(req.URL.Path, "/"+v1.ImageRepositoryResource+"/"):
			reads.Add(1)
		case strings.HasSuffix(req.URL.Path, "/"+v1.ImagePolicyResource):
			lists.Add(1)
		}
	})
	return reads, lists
}

func (f *evalFixture) getRepo(t testing.TB, ns, name string) *v1.ImageRepository {
	t.Helper()
	r, err := f.Kube.Repositories.Get(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// revision is the revision of the tags stored for ns/name under the identity put stores them.
func (f *evalFixture) revision(t testing.TB, ns, name string) string {
	t.Helper()
	key := reconcile.StoreKey(ns, name)
	rev, err := f.Writer.Revision(context.Background(), key, f.IDs[key])
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// A policy evaluated on its creation while a push stores its tags (after the evaluation read the
// stored list, before its status was written) ends at the pushed tag, though the push's event
// found no copy of it: the evaluation sees the stored revision move and derives its outcome
// again from the tags now stored.
func TestEvaluateIntegrationPushDuringFirstEvaluation(t *testing.T) {
	f := newEvalFixture(t)
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0", "1.2.0")
	f.Policy(t, f.NS, "late", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver(">=1.0.0"),
		DigestReflectionPolicy: v1.ReflectNever})
	ev := f.Evaluator(t)
	ev.Policies = watchedPolicies(t, f)
	var pushed atomic.Bool
	ev.Kube = f.Env.ClientSeeing(t, nil, func(req *http.Request) {
		if req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, "/"+v1.ImagePolicyResource+"/late/status") &&
			pushed.CompareAndSwap(false, true) {
			f.add(t, f.NS, "app", "1.3.0")
		}
	})
	out, err := ev.Evaluate(context.Background(), f.NS, "late")
	if err != nil || out.Result != reconcile.PolicySucceeded {
		t.Fatalf("Evaluate = %+v, %v", out, err)
	}
	if !pushed.Load() {
		t.Fatal("the evaluation wrote no status")
	}
	got := f.Get(t, f.NS, "late")
	if want := f.revision(t, f.NS, "app"); got.Status.LatestRef.Tag != "1.3.0" || got.Status.ObservedTagsRevision != want {
		t.Errorf("latestRef %s at %q, want 1.3.0 at %q (the push's)", evaltest.RefString(got.Status.LatestRef), got.Status.ObservedTagsRevision, want)
	}
}

// watchedPolicies starts watched copies of f's ImagePolicies, as the policy function keeps them,
// and waits for their first listing.
func watchedPolicies(t testing.TB, f *evalFixture) *kube.Cache[*v1.ImagePolicy] {
	t.Helper()
	pols := kube.NewCache(f.Kube.Policies, map[string]func(*v1.ImagePolicy) string{
		reconcile.RepositoryIndex: reconcile.PolicyRepository,
	})
	pols.Start(t.Context())
	t.Cleanup(pols.Stop)
	testenv.Eventually(t, 30*time.Second, func() error {
		if !pols.Synced() {
			return errors.New("the copies have not had their first listing")
		}
		return nil
	})
	return pols
}

// laggingPolicies answers as watched copies that have had their first listing but have not yet
// seen the policies created since: they hold none.
type laggingPolicies struct{}

func (laggingPolicies) Indexed(string, string) ([]*v1.ImagePolicy, bool) { return nil, true }

// The first tags of a new repository, announced without a delta, reach a policy created a
// moment before that the watched copies do not show yet: a miss in the copies is listed
// consistently, which sees it, from the apiserver rather than its watch cache.
func TestEvaluateIntegrationCopiesMissIsListedConsistently(t *testing.T) {
	f := newEvalFixture(t)
	f.Repo(t, f.NS, "fresh", "ghcr.io/org/fresh")
	f.Policy(t, f.NS, "new", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("fresh"), Policy: evaltest.Semver(">=1.0.0"),
		DigestReflectionPolicy: v1.ReflectNever})
	f.Put(t, f.NS, "fresh", "1.0.0", "1.2.0")
	ev := f.Evaluator(t)
	ev.Policies = laggingPolicies{}
	var lists atomic.Int64
	var consistent atomic.Bool
	consistent.Store(true)
	ev.Kube = f.Env.ClientSeeing(t, nil, func(req *http.Request) {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/"+v1.ImagePolicyResource) {
			lists.Add(1)
			if rv := req.URL.Query().Get("resourceVersion"); rv != "" {
				consistent.Store(false)
			}
		}
	})
	outs, err := ev.EvaluateChange(context.Background(), events.TagsChanged{Namespace: f.NS, Name: "fresh", Revision: f.revision(t, f.NS, "fresh")})
	if err != nil || len(outs) != 1 || outs[0].Result != reconcile.PolicySucceeded {
		t.Fatalf("EvaluateChange = %+v, %v", outs, err)
	}
	if got := f.Get(t, f.NS, "new").Status.LatestRef; got == nil || got.Tag != "1.2.0" {
		t.Errorf("latestRef %s, want 1.2.0", evaltest.RefString(got))
	}
	if n := lists.Load(); n != 1 || !consistent.Load() {
		t.Errorf("%d listings of the ImagePolicies (consistent: %v), want 1 consistent", n, consistent.Load())
	}
}

// A policy evaluated on its creation, before its repository's first tags are stored, ends at
// the latest of them when they are stored while its status is written, though the copies that
// the scan's event reads may not show it: the evaluation, which found no tags (or no
// repository), sees them appear after its write and derives its outcome again.
func TestEvaluateIntegrationFirstTagsDuringFirstEvaluation(t *testing.T) {
	for _, repoFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("repository=%v", repoFirst), func(t *testing.T) {
			f := newEvalFixture(t)
			if repoFirst {
				f.Repo(t, f.NS, "app", "ghcr.io/org/app")
			}
			f.Policy(t, f.NS, "early", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver(">=1.0.0"),
				DigestReflectionPolicy: v1.ReflectNever})
			ev := f.Evaluator(t)
			ev.Policies = watchedPolicies(t, f)
			var scanned atomic.Bool
			ev.Kube = f.Env.ClientSeeing(t, nil, func(req *http.Request) {
				if req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, "/"+v1.ImagePolicyResource+"/early/status") &&
					scanned.CompareAndSwap(false, true) {
					if !repoFirst {
						f.Repo(t, f.NS, "app", "ghcr.io/org/app")
					}
					f.Put(t, f.NS, "app", "1.0.0", "1.2.0")
				}
			})
			out, err := ev.Evaluate(context.Background(), f.NS, "early")
			if err != nil || out.Result != reconcile.PolicySucceeded {
				t.Fatalf("Evaluate = %+v, %v", out, err)
			}
			if !scanned.Load() {
				t.Fatal("the evaluation wrote no status")
			}
			got := f.Get(t, f.NS, "early")
			if want := f.revision(t, f.NS, "app"); got.Status.LatestRef.Tag != "1.2.0" || got.Status.ObservedTagsRevision != want {
				t.Errorf("latestRef %s at %q, want 1.2.0 at %q (the first scan's)", evaltest.RefString(got.Status.LatestRef), got.Status.ObservedTagsRevision, want)
			}
		})
	}
}
