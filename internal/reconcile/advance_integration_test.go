package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/testenv"
)

// add adds tags to the stored list of ns/name as a scan's incremental path does and returns
// the TagsChanged event it announces, signed with the store's key. digest gives each tag's
// digest.
func (f *evalFixture) add(t testing.TB, ns, name string, tags ...string) events.TagsChanged {
	t.Helper()
	id := f.IDs[reconcile.StoreKey(ns, name)]
	a, err := f.Writer.Push(context.Background(), reconcile.StoreKey(ns, name), id, tags, "")
	if err != nil {
		t.Fatal(err)
	}
	c := events.TagsChanged{Namespace: ns, Name: name, Revision: a.Revision, Delta: &events.TagsDelta{
		UID: id.UID, Image: id.Image, Listing: id.Listing, From: a.From}}
	for _, tag := range a.Tags {
		c.Delta.Added = append(c.Delta.Added, events.AddedTag{Tag: tag, Digest: digestOf(tag)})
	}
	key, err := f.Writer.ProofKey(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Sign(key); err != nil {
		t.Fatal(err)
	}
	return c
}

// digestOf is the digest the tests' deltas give a tag.
func digestOf(tag string) string {
	return "sha256:" + strings.Repeat("0", 64-len(tag)) + strings.Map(func(r rune) rune {
		if strings.ContainsRune("0123456789abcdef", r) {
			return r
		}
		return 'f'
	}, tag)
}

// TestAdvanceIntegration: a policy that read the revision a delta starts from advances by it
// without reading the tag store, and writes the outcome; a delta that does not verify sends it to
// the store instead; outcomes that arrive out of order or after access is withdrawn are written
// as the apiserver holds the objects then. TestAdvanceDecision holds the decision's cases.
func TestAdvanceIntegration(t *testing.T) {
	f := newEvalFixture(t)
	const image = "ghcr.io/org/app"
	// setUp makes a repository of image with tags, and a policy of it evaluated from the store.
	setUp := func(t *testing.T, name, image string, spec v1.ImagePolicySpec, tags ...string) {
		t.Helper()
		f.Repo(t, f.NS, name, image)
		f.Put(t, f.NS, name, tags...)
		spec.ImageRepositoryRef = evaltest.RefTo(name)
		f.Policy(t, f.NS, name, spec)
		if out := f.Evaluate(t, f.NS, name); out.Result != reconcile.PolicySucceeded {
			t.Fatalf("first evaluation: %+v", out)
		}
		f.Cached(t, f.NS+"/"+name)
	}

	t.Run("advances without the store", func(t *testing.T) {
		// The first evaluation resolves the digest of 1.2.0 in a registry of the test's own.
		reg := testenv.NewRegistry(t)
		reg.Push(t, "org/app", "1.0.0", "1.2.0")
		image := reg.Image("org/app")
		setUp(t, "advance", image, v1.ImagePolicySpec{Policy: evaltest.Semver(">=1.0.0"), DigestReflectionPolicy: v1.ReflectIfNotPresent},
			"1.0.0", "1.2.0")
		c := f.add(t, f.NS, "advance", "1.3.0", "0.9.0")
		outs, err := f.Storeless(t).EvaluateChange(context.Background(), c)
		if err != nil || len(outs) != 1 || outs[0].Result != reconcile.PolicySucceeded {
			t.Fatalf("EvaluateChange = %+v, %v", outs, err)
		}
		p := f.Get(t, f.NS, "advance")
		want := v1.ImageRef{Name: image, Tag: "1.3.0", Digest: digestOf("1.3.0")}
		if p.Status.LatestRef == nil || *p.Status.LatestRef != want || p.Status.ObservedTagsRevision != c.Revision {
			t.Fatalf("latestRef %s at revision %q; want %s at %q", evaltest.RefString(p.Status.LatestRef), p.Status.ObservedTagsRevision, want, c.Revision)
		}
		evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "updated from 1.2.0 to 1.3.0", Stalled: false})
	})

	// A delta that does not verify is not applied: through a store without tags the evaluation
	// fails and keeps latestRef, while through the real store it selects from every tag. The
	// other reasons not to advance are cases of TestAdvanceDecision, and the refusals of
	// Verified cases of the events package's TestDeltaRefused.
	t.Run("unsigned", func(t *testing.T) {
		setUp(t, "unsigned", image, v1.ImagePolicySpec{Policy: evaltest.Semver(">=1.0.0"), DigestReflectionPolicy: v1.ReflectNever}, "1.0.0", "1.2.0")
		c := f.add(t, f.NS, "unsigned", "1.3.0")
		c.Delta.Proof = ""
		outs, _ := f.Storeless(t).EvaluateChange(context.Background(), c)
		p := f.Get(t, f.NS, "unsigned")
		if len(outs) != 1 || outs[0].Result == reconcile.PolicySucceeded || p.Status.LatestRef.Tag != "1.2.0" {
			t.Fatalf("through a store without tags: %+v, latestRef %s; want a failure that keeps 1.2.0", outs, evaltest.RefString(p.Status.LatestRef))
		}
		f.Cached(t, f.NS+"/unsigned")
		if _, err := f.Evaluator(t).EvaluateChange(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if p = f.Get(t, f.NS, "unsigned"); p.Status.LatestRef.Tag != "1.3.0" {
			t.Fatalf("through the store: latestRef %s, want 1.3.0", evaltest.RefString(p.Status.LatestRef))
		}
	})

	t.Run("events in the opposite order", func(t *testing.T) {
		setUp(t, "order", image, v1.ImagePolicySpec{Policy: evaltest.Semver(">=1.0.0")}, "1.0.0")
		first := f.add(t, f.NS, "order", "1.1.0")
		second := f.add(t, f.NS, "order", "1.2.0")
		seen := watchLatest(t, f, "order")
		ev := f.Evaluator(t)
		for _, c := range []events.TagsChanged{second, first, second} {
			f.Cached(t, f.NS+"/order")
			if _, err := ev.EvaluateChange(context.Background(), c); err != nil {
				t.Fatal(err)
			}
		}
		p := f.Get(t, f.NS, "order")
		if p.Status.LatestRef.Tag != "1.2.0" || p.Status.ObservedTagsRevision != second.Revision {
			t.Fatalf("latestRef %s at %q; want 1.2.0 at %q", evaltest.RefString(p.Status.LatestRef), p.Status.ObservedTagsRevision, second.Revision)
		}
		for _, tag := range seen() {
			if tag != "1.0.0" && tag != "1.2.0" {
				t.Fatalf("a watch saw latestRef %s; it must go from 1.0.0 to 1.2.0 only (saw %q)", tag, seen())
			}
		}
	})

	t.Run("cross-namespace access withdrawn", func(t *testing.T) {
		other := f.Env.Namespace(t)
		repo := f.Repo(t, f.NS, "shared", image, func(r *v1.ImageRepository) {
			r.Spec.AccessFrom = &v1.AccessFrom{NamespaceSelectors: []v1.NamespaceSelector{{MatchLabels: map[string]string{}}}}
		})
		f.Put(t, f.NS, "shared", "1.0.0")
		spec := v1.ImagePolicySpec{Policy: evaltest.Semver(">=1.0.0"),
			ImageRepositoryRef: v1.NamespacedObjectReference{Name: "shared", Namespace: f.NS}}
		f.Policy(t, other, "consumer", spec)
		if out := f.Evaluate(t, other, "consumer"); out.Result != reconcile.PolicySucceeded {
			t.Fatalf("first evaluation: %+v", out)
		}
		repo.Spec.AccessFrom = nil
		if _, err := f.Kube.Repositories.Update(context.Background(), repo); err != nil {
			t.Fatal(err)
		}
		f.Cached(t, other+"/consumer")
		c := f.add(t, f.NS, "shared", "2.0.0")
		outs, _ := f.Storeless(t).EvaluateChange(context.Background(), c)
		p := f.Get(t, other, "consumer")
		if p.Status.LatestRef.Tag != "1.0.0" || len(outs) != 1 || outs[0].Reason != v1.AccessDeniedReason {
			t.Fatalf("outcomes %+v, latestRef %s; want AccessDenied keeping 1.0.0", outs, evaltest.RefString(p.Status.LatestRef))
		}
	})
}

// watchLatest watches the policy ns/name of f and returns a function that lists the latestRef
// tags the watch showed, in order, once it has delivered the policy as it is then.
func watchLatest(t testing.TB, f *evalFixture, name string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := f.Get(t, f.NS, name)
	w, err := f.Kube.Policies.Watch(ctx, f.NS, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		tag, rv string
	}
	got := make(chan seen, 100)
	go func() {
		defer close(got)
		for e := range w.ResultChan() {
			if pol, ok := e.Object.(*v1.ImagePolicy); ok && pol.Status.LatestRef != nil {
				got <- seen{pol.Status.LatestRef.Tag, pol.ResourceVersion}
			}
		}
	}()
	return func() []string {
		final := f.Get(t, f.NS, name).ResourceVersion
		var tags []string
		timeout := time.After(10 * time.Second)
		for {
			select {
			case s, ok := <-got:
				if !ok {
					t.Fatal("the watch ended before it delivered the last write")
				}
				if n := len(tags); n == 0 || tags[n-1] != s.tag {
					tags = append(tags, s.tag)
				}
				if s.rv == final {
					cancel()
					return slices.Clone(tags)
				}
			case <-timeout:
				t.Fatalf("the watch did not deliver resourceVersion %s; saw %q", final, tags)
			}
		}
	}
}
