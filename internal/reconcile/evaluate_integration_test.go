package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestEvaluateIntegrationRules runs cases of TestEvaluateRules, the specification of one
// evaluation, through the apiserver and the tag store: one of each way an evaluation ends (a new
// latestRef, no repository, no stored tags, a stalled spec), which shows that Evaluate reads
// and writes what the decisions there take and give.
func TestEvaluateIntegrationRules(t *testing.T) {
	f := newEvalFixture(t)
	const image = "ghcr.io/org/app"
	prior := func() *v1.ImageRef { return &v1.ImageRef{Name: image, Tag: "0.0.1"} }
	for _, tc := range []struct {
		name    string
		image   string // "" means image
		noRepo  bool
		tags    []string // nil means no store entry
		spec    v1.ImagePolicySpec
		result  string
		tag     string // the new latest tag; "" means the prior one is kept
		reason  string
		message string
		stalled bool
	}{
		{name: "semver", tags: []string{"1.0.0", "1.2.0", "2.0.0-rc.1", "latest"},
			spec:   v1.ImagePolicySpec{Policy: evaltest.Semver(">=1.0.0")},
			result: reconcile.PolicySucceeded, tag: "1.2.0", reason: v1.SucceededReason,
			message: "Latest image tag for 'ghcr.io/org/app' updated from 0.0.1 to 1.2.0"},
		{name: "missing-repository", noRepo: true, tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: evaltest.Semver("*")},
			result: reconcile.PolicyFailed, reason: v1.DependencyNotReadyReason, message: "does not exist"},
		{name: "never-scanned",
			spec:   v1.ImagePolicySpec{Policy: evaltest.Semver("*")},
			result: reconcile.PolicyFailed, reason: v1.DependencyNotReadyReason, message: "no tags in the tag store"},
		{name: "invalid-range", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: evaltest.Semver("not a range")},
			result: reconcile.PolicyStalled, reason: v1.InvalidPolicyReason, message: "invalid policy", stalled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := image
			if tc.image != "" {
				img = tc.image
			}
			if !tc.noRepo {
				f.Repo(t, f.NS, tc.name, img)
			}
			if tc.tags != nil {
				f.Put(t, f.NS, tc.name, tc.tags...)
			}
			spec := tc.spec
			spec.ImageRepositoryRef = evaltest.RefTo(tc.name)
			f.Policy(t, f.NS, tc.name, spec)
			f.Seed(t, f.NS, tc.name, prior())

			out := f.Evaluate(t, f.NS, tc.name)
			p := f.Get(t, f.NS, tc.name)
			if out.Result != tc.result {
				t.Errorf("result %q, want %q (%s)", out.Result, tc.result, out.Message)
			}
			status := metav1.ConditionFalse
			if tc.tag != "" {
				status = metav1.ConditionTrue
			}
			evaltest.CheckReady(t, p, evaltest.WantReady{Status: status, Reason: tc.reason, Msg: tc.message, Stalled: tc.stalled})
			want := prior()
			if tc.tag != "" {
				want = &v1.ImageRef{Name: img, Tag: tc.tag}
				if !evaltest.SameRef(p.Status.ObservedPreviousRef, prior()) {
					t.Errorf("observedPreviousRef %s, want %s", evaltest.RefString(p.Status.ObservedPreviousRef), prior())
				}
			} else if p.Status.ObservedPreviousRef != nil {
				t.Errorf("a failure set observedPreviousRef %s", evaltest.RefString(p.Status.ObservedPreviousRef))
			}
			if !evaltest.SameRef(p.Status.LatestRef, want) || !evaltest.SameRef(out.Latest, want) {
				t.Errorf("latestRef %s (outcome %s), want %s", evaltest.RefString(p.Status.LatestRef), evaltest.RefString(out.Latest), want)
			}
			if tc.tag != "" {
				// The cron reconciler finds lost TagsChanged events by this revision.
				rev, err := f.Writer.Revision(context.Background(), reconcile.StoreKey(f.NS, tc.name), f.IDs[reconcile.StoreKey(f.NS, tc.name)])
				if err != nil {
					t.Fatal(err)
				}
				w := reconcile.Window{Now: time.Now(), Period: time.Minute}
				if due := reconcile.PolicyDue(p, rev, w); due != "" {
					t.Errorf("due after evaluating revision %s: %q (%+v)", rev, due, p.Status.Conditions)
				}
				if due := reconcile.PolicyDue(p, "sha256:other", w); due != reconcile.DueTagsChanged {
					t.Errorf("due for another revision: %q", due)
				}
			}
			if tc.tag == "" {
				f.WaitEvent(t, tc.name, corev1.EventTypeWarning, tc.reason, tc.message)
			} else {
				f.WaitEvent(t, tc.name, corev1.EventTypeNormal, v1.SucceededReason, tc.message)
			}
		})
	}
}

// TestEvaluateIntegrationCrossNamespace checks accessFrom: a policy may use a repository of
// another namespace only when one of the repository's namespace selectors matches the labels of
// the policy's namespace, and the decision follows the labels as they change. Every refusal of a
// cross-namespace reference, whether the repository has no accessFrom, one that does not match,
// or does not exist, is one answer in the status and the Events, written once: its repetitions,
// which the other namespace's repository causes, write nothing.
func TestEvaluateIntegrationCrossNamespace(t *testing.T) {
	f := newEvalFixture(t)
	ctx := context.Background()
	blue := f.Env.Namespace(t, map[string]string{"team": "blue"})
	red := f.Env.Namespace(t, map[string]string{"team": "red"})
	f.Repo(t, f.NS, "open", "ghcr.io/org/open", func(r *v1.ImageRepository) {
		r.Spec.AccessFrom = &v1.AccessFrom{NamespaceSelectors: []v1.NamespaceSelector{{}}}
	})
	f.Repo(t, f.NS, "blue-only", "ghcr.io/org/blue", func(r *v1.ImageRepository) {
		r.Spec.AccessFrom = &v1.AccessFrom{NamespaceSelectors: []v1.NamespaceSelector{
			{MatchLabels: map[string]string{"team": "green"}},
			{MatchLabels: map[string]string{"team": "blue"}},
		}}
	})
	f.Repo(t, f.NS, "closed", "ghcr.io/org/closed")
	for _, r := range []string{"open", "blue-only", "closed"} {
		f.Put(t, f.NS, r, "1.0.0", "1.1.0")
	}
	ref := func(name string) v1.ImagePolicySpec {
		return v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Namespace: f.NS, Name: name}, Policy: evaltest.Semver("1.x")}
	}
	// The one answer, which names only what the policy itself names.
	denied := func(repo string) string {
		return fmt.Sprintf("failed to get the referred ImageRepository: access denied: ImageRepository '%s/%s' does not exist or its accessFrom does not admit namespace '%s'", f.NS, repo, red)
	}
	rec := kube.NewRecorder(f.Kube, "reflector-policy")
	f.Ev.Recorder = rec
	var refused []string
	for _, tc := range []struct {
		ns, repo string
		allowed  bool
	}{
		{ns: blue, repo: "blue-only", allowed: true},
		{ns: red, repo: "blue-only"},
		{ns: red, repo: "closed"},
		{ns: red, repo: "missing"},
		{ns: red, repo: "open", allowed: true},
	} {
		f.Policy(t, tc.ns, tc.repo, ref(tc.repo))
		out := f.Evaluate(t, tc.ns, tc.repo)
		p := f.Get(t, tc.ns, tc.repo)
		if tc.allowed {
			evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "resolved to 1.1.0", Stalled: false})
			continue
		}
		refused = append(refused, tc.repo)
		if out.Result != reconcile.PolicyFailed || out.Reason != v1.AccessDeniedReason || out.Message != denied(tc.repo) {
			t.Errorf("%s/%s: outcome %+v", tc.ns, tc.repo, out)
		}
		evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.AccessDeniedReason, Msg: denied(tc.repo), Stalled: false})
		if ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition); ready.Message != denied(tc.repo) {
			t.Errorf("%s/%s: Ready message %q, want exactly %q", tc.ns, tc.repo, ready.Message, denied(tc.repo))
		}
		if p.Status.LatestRef != nil {
			t.Errorf("%s/%s: denied access gave latestRef %s", tc.ns, tc.repo, p.Status.LatestRef)
		}
	}
	rec.Shutdown()
	checkRefusalEvents(t, f, red, refused, denied)

	// The refusals again, as the other namespace's repositories cause them (their tags change,
	// one is created) and by a restarted process: nothing is written and no Event recorded.
	versions := map[string]string{}
	for _, name := range refused {
		versions[name] = f.Get(t, red, name).ResourceVersion
	}
	rec = kube.NewRecorder(f.Kube, "reflector-policy")
	f.Ev = f.Evaluator(t)
	f.Ev.Recorder = rec
	f.Cached(t, red+"/blue-only", red+"/closed")
	for _, repo := range []string{"blue-only", "closed"} {
		f.Put(t, f.NS, repo, "1.0.0", "1.1.0", "1.2.0")
		if _, err := f.Ev.EvaluateRepository(ctx, f.NS, repo); err != nil {
			t.Fatal(err)
		}
	}
	f.Repo(t, f.NS, "missing", "ghcr.io/org/missing")
	for _, name := range refused {
		if out := f.Evaluate(t, red, name); out.Reason != v1.AccessDeniedReason || out.Message != denied(name) {
			t.Errorf("%s/%s evaluated again: %+v", red, name, out)
		}
	}
	rec.Shutdown()
	for _, name := range refused {
		if got := f.Get(t, red, name).ResourceVersion; got != versions[name] {
			t.Errorf("%s/%s: the repeated refusal wrote the status (resourceVersion %s, was %s)", red, name, got, versions[name])
		}
	}
	checkRefusalEvents(t, f, red, refused, denied)

	// Relabelling the namespace grants access on the next evaluation, to the tags stored since.
	f.Ev.Recorder = f.Rec
	patch := []byte(`{"metadata":{"labels":{"team":"blue"}}}`)
	if _, err := f.Kube.Namespaces.Patch(ctx, "", red, types.MergePatchType, patch); err != nil {
		t.Fatal(err)
	}
	if out := f.Evaluate(t, red, "blue-only"); out.Result != reconcile.PolicySucceeded {
		t.Errorf("after relabelling: %+v", out)
	}
	evaltest.CheckReady(t, f.Get(t, red, "blue-only"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "resolved to 1.2.0", Stalled: false})
}

// checkRefusalEvents checks that each ImagePolicy of ns named in policies has exactly one
// Event, counted once, and that it is the Warning AccessDenied whose message want gives: one
// answer, told once. The Events are read after their Recorder has shut down.
func checkRefusalEvents(t *testing.T, f *evalFixture, ns string, policies []string, want func(string) string) {
	t.Helper()
	list, err := f.Kube.Events.List(context.Background(), ns, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range policies {
		var seen []string
		count := int32(0)
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != v1.ImagePolicyKind || e.InvolvedObject.Name != name {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %s %q x%d", e.Type, e.Reason, e.Message, e.Count))
			if e.Type == corev1.EventTypeWarning && e.Reason == v1.AccessDeniedReason && e.Message == want(name) {
				count += max(e.Count, 1)
			}
		}
		if len(seen) != 1 || count != 1 {
			t.Errorf("ImagePolicy %s/%s: Events %q, want one Warning %s %q", ns, name, seen, v1.AccessDeniedReason, want(name))
		}
	}
}

// TestEvaluateIntegrationNoCrossNamespaceRefs: with Flux's --no-cross-namespace-refs
// (Evaluator.NoCrossNamespaceRefs), a policy that refers to another namespace is refused with
// Flux's reason and message and Stalled, whether the repository exists and admits it or does not
// exist, in the status and the Events alike; a policy of the repository's own namespace is
// evaluated as before. TestBlockedReference holds the decision's cases; this test shows the
// refusal written and announced.
func TestEvaluateIntegrationNoCrossNamespaceRefs(t *testing.T) {
	f := newEvalFixture(t)
	other := f.Env.Namespace(t)
	f.Repo(t, f.NS, "open", "ghcr.io/org/open", func(r *v1.ImageRepository) {
		r.Spec.AccessFrom = &v1.AccessFrom{NamespaceSelectors: []v1.NamespaceSelector{{}}}
	})
	f.Put(t, f.NS, "open", "1.0.0", "1.1.0")
	rec := kube.NewRecorder(f.Kube, "reflector-policy")
	f.Ev.Recorder = rec
	f.Ev.NoCrossNamespaceRefs = true

	blocked := func(repo string) string {
		return fmt.Sprintf("failed to get the referred ImageRepository: cannot access 'ImageRepository/%s/%s', cross-namespace references have been blocked", f.NS, repo)
	}
	for _, repo := range []string{"open", "missing"} {
		f.Policy(t, other, repo, v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Namespace: f.NS, Name: repo}, Policy: evaltest.Semver("1.x")})
		out := f.Evaluate(t, other, repo)
		if out.Result != reconcile.PolicyStalled || out.Reason != v1.AccessDeniedReason || out.Message != blocked(repo) {
			t.Errorf("%s/%s: outcome %+v", other, repo, out)
		}
		p := f.Get(t, other, repo)
		evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.AccessDeniedReason, Msg: blocked(repo), Stalled: true})
		if p.Status.LatestRef != nil {
			t.Errorf("%s/%s: a blocked reference gave latestRef %s", other, repo, p.Status.LatestRef)
		}
	}
	f.Policy(t, f.NS, "own", v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Namespace: f.NS, Name: "open"}, Policy: evaltest.Semver("1.x")})
	if out := f.Evaluate(t, f.NS, "own"); out.Result != reconcile.PolicySucceeded {
		t.Errorf("a policy of the repository's own namespace, naming it: %+v", out)
	}
	f.Ev.Recorder = f.Rec
	rec.Shutdown()
	checkRefusalEvents(t, f, other, []string{"open", "missing"}, blocked)
}

// TestEvaluateIntegrationPolicyEdited follows a policy from its first resolution through an
// edit from semver to alphabetical: latestRef, observedPreviousRef, Flux's messages, the
// Kubernetes Events and the LatestChanged CloudEvents.
func TestEvaluateIntegrationPolicyEdited(t *testing.T) {
	f := newEvalFixture(t)
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0", "1.5.0", "2.0.0", "zeta", "alpha")
	created := f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver(">=1.0.0")})

	out := f.Evaluate(t, f.NS, "app")
	first := &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "2.0.0"}
	if !out.Changed || out.Previous != nil || !evaltest.SameRef(out.Latest, first) {
		t.Errorf("first evaluation: %+v", out)
	}
	p := f.Get(t, f.NS, "app")
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "", Stalled: false})
	if msg := p.Status.Conditions[0].Message; msg != "Latest image tag for 'ghcr.io/org/app' resolved to 2.0.0" {
		t.Errorf("message %q", msg)
	}
	if p.Status.ObservedPreviousRef != nil || p.Status.ObservedGeneration != created.Generation {
		t.Errorf("status after first evaluation: %+v", p.Status)
	}

	f.Edit(t, f.NS, "app", func(s *v1.ImagePolicySpec) { s.Policy = evaltest.Alphabetical("") })
	out = f.Evaluate(t, f.NS, "app")
	second := &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "zeta"}
	if !out.Changed || !evaltest.SameRef(out.Previous, first) || !evaltest.SameRef(out.Latest, second) {
		t.Errorf("after the edit: %+v", out)
	}
	p = f.Get(t, f.NS, "app")
	const msg = "Latest image tag for 'ghcr.io/org/app' updated from 2.0.0 to zeta"
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: msg, Stalled: false})
	if p.Generation == created.Generation || !evaltest.SameRef(p.Status.LatestRef, second) || !evaltest.SameRef(p.Status.ObservedPreviousRef, first) {
		t.Errorf("status after the edit: generation %d, %+v", p.Generation, p.Status)
	}
	f.WaitEvent(t, "app", corev1.EventTypeNormal, v1.SucceededReason, msg)

	got := f.Sink.About(f.NS, "app")
	if len(got) != 2 || got[0].Previous != nil || !evaltest.SameRef(got[0].Latest, first) ||
		!evaltest.SameRef(got[1].Previous, first) || !evaltest.SameRef(got[1].Latest, second) {
		t.Errorf("LatestChanged events: %+v", got)
	}

	// The same result again changes nothing and announces nothing.
	f.Edit(t, f.NS, "app", func(s *v1.ImagePolicySpec) { s.FilterTags = &v1.TagFilter{Pattern: "^[a-z]"} })
	if out := f.Evaluate(t, f.NS, "app"); out.Changed || out.Result != reconcile.PolicySucceeded {
		t.Errorf("re-evaluation with the same result: %+v", out)
	}
	if got := f.Sink.About(f.NS, "app"); len(got) != 2 {
		t.Errorf("%d LatestChanged events, want still 2", len(got))
	}
}

// TestEvaluateIntegrationDigestReflection resolves digests against a real registry under the
// three digestReflectionPolicy values, including a tag that moves to a new image.
func TestEvaluateIntegrationDigestReflection(t *testing.T) {
	f := newEvalFixture(t)
	ctx := context.Background()
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "1.0.0")
	d1 := reg.Push(t, "app", "1.1.0")
	image := reg.Image("app")
	f.Repo(t, f.NS, "app", image, func(r *v1.ImageRepository) { r.Spec.Insecure = true })
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	heads := func() int {
		n := 0
		for _, r := range reg.Requests() {
			if r.Method == http.MethodHead && strings.Contains(r.URI, "/manifests/") {
				n++
			}
		}
		return n
	}
	spec := func(p v1.ReflectionPolicy) v1.ImagePolicySpec {
		s := v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("1.x"), DigestReflectionPolicy: p}
		if p == v1.ReflectAlways {
			s.Interval = &metav1.Duration{Duration: time.Minute}
		}
		return s
	}
	for _, p := range []v1.ReflectionPolicy{v1.ReflectNever, v1.ReflectIfNotPresent, v1.ReflectAlways} {
		f.Policy(t, f.NS, strings.ToLower(string(p)), spec(p))
	}
	latest := func(name string) *v1.ImageRef { return f.Get(t, f.NS, name).Status.LatestRef }
	want := func(digest string) *v1.ImageRef { return &v1.ImageRef{Name: image, Tag: "1.1.0", Digest: digest} }

	for name, digest := range map[string]string{"never": "", "ifnotpresent": d1, "always": d1} {
		before := heads()
		f.Evaluate(t, f.NS, name)
		if got := latest(name); !evaltest.SameRef(got, want(digest)) {
			t.Errorf("%s: latestRef %s, want %s", name, evaltest.RefString(got), want(digest))
		}
		if wantHeads := map[bool]int{true: 0, false: 1}[digest == ""]; heads()-before != wantHeads {
			t.Errorf("%s: %d HEAD requests, want %d", name, heads()-before, wantHeads)
		}
	}
	// Flux's message names the tag; the digest is in latestRef.
	evaltest.CheckReady(t, f.Get(t, f.NS, "always"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "Latest image tag for '" + image + "' resolved to 1.1.0", Stalled: false})

	// 1.1.0 moves to a new image; the tag list is the same.
	d2 := reg.Push(t, "app", "1.1.0")
	before := heads()
	for _, name := range []string{"never", "ifnotpresent"} {
		if out := f.Evaluate(t, f.NS, name); out.Result != reconcile.PolicyUnchanged {
			t.Errorf("%s with unchanged tags: %+v", name, out)
		}
	}
	// A reconcile request evaluates again, but IfNotPresent keeps the digest it has.
	if _, err := f.Kube.Policies.RequestReconcile(ctx, f.NS, "ifnotpresent", testenv.RequestToken(time.Now())); err != nil {
		t.Fatal(err)
	}
	if out := f.Evaluate(t, f.NS, "ifnotpresent"); out.Result != reconcile.PolicySucceeded || out.Changed {
		t.Errorf("ifnotpresent on request: %+v", out)
	}
	if heads() != before {
		t.Errorf("%d HEAD requests for Never and IfNotPresent with a digest, want 0", heads()-before)
	}
	if got := latest("ifnotpresent"); !evaltest.SameRef(got, want(d1)) {
		t.Errorf("ifnotpresent: latestRef %s, want the old digest", evaltest.RefString(got))
	}
	out := f.Evaluate(t, f.NS, "always")
	if !out.Changed || !evaltest.SameRef(out.Latest, want(d2)) || !evaltest.SameRef(out.Previous, want(d1)) || heads() != before+1 {
		t.Errorf("always after the move: %+v, %d HEAD requests", out, heads()-before)
	}
	evaltest.CheckReady(t, f.Get(t, f.NS, "always"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "Latest image tag for '" + image + "' resolved to 1.1.0", Stalled: false})
	if got := f.Sink.About(f.NS, "always"); len(got) != 2 || !evaltest.SameRef(got[1].Latest, want(d2)) {
		t.Errorf("LatestChanged events of always: %+v", got)
	}

	// Switching to Never removes the digest.
	f.Edit(t, f.NS, "always", func(s *v1.ImagePolicySpec) { s.DigestReflectionPolicy, s.Interval = v1.ReflectNever, nil })
	if out := f.Evaluate(t, f.NS, "always"); !out.Changed || !evaltest.SameRef(out.Latest, want("")) {
		t.Errorf("always switched to Never: %+v", out)
	}

	// A new latest tag gets its digest under IfNotPresent.
	d3 := reg.Push(t, "app", "1.2.0")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0", "1.2.0")
	out = f.Evaluate(t, f.NS, "ifnotpresent")
	if wantRef := (&v1.ImageRef{Name: image, Tag: "1.2.0", Digest: d3}); !out.Changed || !evaltest.SameRef(out.Latest, wantRef) {
		t.Errorf("ifnotpresent with a new tag: %+v", out)
	}
}

// TestEvaluateIntegrationDigestFailureKeepsLatestRef: a HEAD that the registry refuses leaves
// the status's latestRef alone and reports the registry's failure.
func TestEvaluateIntegrationDigestFailureKeepsLatestRef(t *testing.T) {
	f := newEvalFixture(t)
	reg := testenv.NewRegistry(t)
	d := reg.Push(t, "app", "1.0.0")
	f.Repo(t, f.NS, "app", reg.Image("app"), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
	f.Put(t, f.NS, "app", "1.0.0", "2.0.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("1.x"),
		DigestReflectionPolicy: v1.ReflectIfNotPresent})
	f.Evaluate(t, f.NS, "app")
	f.Edit(t, f.NS, "app", func(s *v1.ImagePolicySpec) { s.Policy = evaltest.Semver("*") })

	out := f.Evaluate(t, f.NS, "app")
	p := f.Get(t, f.NS, "app")
	wantRef := &v1.ImageRef{Name: reg.Image("app"), Tag: "1.0.0", Digest: d}
	if out.Result != reconcile.PolicyFailed || !evaltest.SameRef(p.Status.LatestRef, wantRef) {
		t.Errorf("outcome %+v, latestRef %s", out, evaltest.RefString(p.Status.LatestRef))
	}
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.ReadOperationFailedReason, Msg: `tag "2.0.0" not found`, Stalled: false})
}

// TestEvaluateIntegrationStoreEntryLostKeepsLatestRef: a store entry deleted or emptied under a
// policy (a lost volume, a restart) never changes its latestRef.
func TestEvaluateIntegrationStoreEntryLostKeepsLatestRef(t *testing.T) {
	f := newEvalFixture(t)
	ctx := context.Background()
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*")})
	f.Evaluate(t, f.NS, "app")
	want := &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.1.0"}

	if _, err := f.Writer.Delete(ctx, reconcile.StoreKey(f.NS, "app")); err != nil {
		t.Fatal(err)
	}
	out := f.Evaluate(t, f.NS, "app")
	p := f.Get(t, f.NS, "app")
	if out.Result != reconcile.PolicyFailed || !evaltest.SameRef(p.Status.LatestRef, want) {
		t.Errorf("after deleting the entry: %+v, latestRef %s", out, evaltest.RefString(p.Status.LatestRef))
	}
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.DependencyNotReadyReason, Msg: "no tags in the tag store", Stalled: false})

	f.Put(t, f.NS, "app")
	out = f.Evaluate(t, f.NS, "app")
	if p := f.Get(t, f.NS, "app"); out.Result != reconcile.PolicyFailed || !evaltest.SameRef(p.Status.LatestRef, want) {
		t.Errorf("with an empty entry: %+v, latestRef %s", out, evaltest.RefString(p.Status.LatestRef))
	}
	if got := f.Sink.About(f.NS, "app"); len(got) != 1 {
		t.Errorf("%d LatestChanged events, want only the first resolution", len(got))
	}

	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || out.Changed {
		t.Errorf("after the store came back: %+v", out)
	}
	evaltest.CheckReady(t, f.Get(t, f.NS, "app"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "resolved to 1.1.0", Stalled: false})
}

// TestEvaluateIntegrationDamagedStoreKeepsLatestRef: a damaged store, read before a writer set
// it aside and after, never changes a policy's latestRef. The policy says TagStoreDamaged, first
// that the store is unreadable, then that its tags were lost, and resolves to the same latestRef,
// without a new announcement, once its tags are stored again.
func TestEvaluateIntegrationDamagedStoreKeepsLatestRef(t *testing.T) {
	f := newEvalFixture(t)
	ctx := context.Background()
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	if _, err := f.Kube.Repositories.UpdateStatus(ctx, f.NS, "app", func(r *v1.ImageRepository) error {
		r.Status.LastScanResult = &v1.ScanResult{TagCount: 2, ScanTime: metav1.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*")})
	f.Evaluate(t, f.NS, "app")
	want := &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.1.0"}
	for _, s := range []*store.Store{f.Writer, f.Reader} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.Dir, badger.ManifestFilename), []byte("not a manifest"), 0o644); err != nil {
		t.Fatal(err)
	}

	reader := store.New(f.Dir, store.ReadOnly())
	defer reader.Close()
	ev := f.Evaluator(t)
	ev.Store = reader
	out, err := ev.Evaluate(ctx, f.NS, "app")
	if !errors.Is(err, store.ErrCorrupt) || out.Reason != v1.TagStoreDamagedReason {
		t.Errorf("on the damaged store: %+v, %v; want TagStoreDamaged and ErrCorrupt", out, err)
	}
	p := f.Get(t, f.NS, "app")
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.TagStoreDamagedReason, Msg: "tag store is unreadable", Stalled: false})
	if !evaltest.SameRef(p.Status.LatestRef, want) {
		t.Errorf("on the damaged store: latestRef %s, want 1.1.0 kept", evaltest.RefString(p.Status.LatestRef))
	}

	writer := store.New(f.Dir, store.WithLinger(0))
	defer writer.Close()
	if _, err := writer.Keys(ctx); err != nil {
		t.Fatalf("the writer did not rebuild the store: %v", err)
	}
	if out := f.evaluateWith(t, ev); out.Reason != v1.TagStoreDamagedReason {
		t.Errorf("on the rebuilt store: %+v, want TagStoreDamaged", out)
	}
	p = f.Get(t, f.NS, "app")
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.TagStoreDamagedReason, Msg: "lost when the tag store was found damaged", Stalled: false})
	if !evaltest.SameRef(p.Status.LatestRef, want) {
		t.Errorf("on the rebuilt store: latestRef %s, want 1.1.0 kept", evaltest.RefString(p.Status.LatestRef))
	}

	key := reconcile.StoreKey(f.NS, "app")
	if _, _, err := writer.Put(ctx, key, f.IDs[key], []string{"1.0.0", "1.1.0"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if out := f.evaluateWith(t, ev); out.Result != reconcile.PolicySucceeded || out.Changed {
		t.Errorf("once the tags are back: %+v, want the same latestRef", out)
	}
	evaltest.CheckReady(t, f.Get(t, f.NS, "app"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "resolved to 1.1.0", Stalled: false})
	if got := f.Sink.About(f.NS, "app"); len(got) != 1 {
		t.Errorf("%d LatestChanged events, want only the first resolution", len(got))
	}
}

// evaluateWith evaluates the policy ns/app with ev, after a reconcile request so that it is due.
func (f *evalFixture) evaluateWith(t *testing.T, ev *reconcile.Evaluator) reconcile.PolicyOutcome {
	t.Helper()
	if _, err := f.Kube.Policies.RequestReconcile(context.Background(), f.NS, "app", testenv.RequestToken(time.Now())); err != nil {
		t.Fatal(err)
	}
	out, err := ev.Evaluate(context.Background(), f.NS, "app")
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return out
}

// holdStore opens the Badger directory read-write, as the scan function does while it writes,
// and returns a function that closes it.
func holdStore(t *testing.T, dir string) (release func()) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
		if err != nil {
			return fmt.Errorf("holding the store: %w", err)
		}
		var once bool
		release = func() {
			if !once {
				once = true
				if err := db.Close(); err != nil {
					t.Error(err)
				}
			}
		}
		return nil
	})
	t.Cleanup(release)
	return release
}

// TestEvaluateIntegrationStoreHeldByWriter: an evaluation that finds the store held by a writer
// waits for it and succeeds; one whose wait runs out reports ReadOperationFailed, keeps
// latestRef, and returns an error so that its event is delivered again.
func TestEvaluateIntegrationStoreHeldByWriter(t *testing.T) {
	f := newEvalFixture(t)
	ctx := context.Background()
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*")})
	if err := f.Writer.Close(); err != nil {
		t.Fatal(err)
	}

	const hold = 700 * time.Millisecond
	// A writer that keeps the store for a while: the duration is the scenario, and the
	// evaluation must have waited at least that long.
	release := holdStore(t, f.Dir)
	start := time.Now()
	time.AfterFunc(hold, release)
	out := f.Evaluate(t, f.NS, "app")
	if waited := time.Since(start); waited < hold || out.Result != reconcile.PolicySucceeded || out.Latest.Tag != "1.1.0" {
		t.Errorf("after waiting %s: %+v", waited, out)
	}

	release = holdStore(t, f.Dir)
	defer release()
	impatient := f.Evaluator(t)
	impatient.StoreWait = 300 * time.Millisecond
	if _, err := f.Kube.Policies.RequestReconcile(ctx, f.NS, "app", testenv.RequestToken(time.Now())); err != nil {
		t.Fatal(err)
	}
	out, err := impatient.Evaluate(ctx, f.NS, "app")
	if !errors.Is(err, store.ErrLocked) || out.Reason != v1.ReadOperationFailedReason {
		t.Errorf("held past the wait: %+v, %v", out, err)
	}
	p := f.Get(t, f.NS, "app")
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.ReadOperationFailedReason, Msg: "tag store is held by another process", Stalled: false})
	if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "1.1.0" {
		t.Errorf("latestRef %s, want 1.1.0 kept", evaltest.RefString(p.Status.LatestRef))
	}
}

// TestEvaluateIntegrationSkipsUnchanged: an evaluation from the same generation, reconcile
// request and tag revision as the last successful one reads and writes nothing; each of those
// changing evaluates again; a new process evaluates again and writes nothing new.
func TestEvaluateIntegrationSkipsUnchanged(t *testing.T) {
	f := newEvalFixture(t)
	ctx := context.Background()
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*")})
	rv := func() string { return f.Get(t, f.NS, "app").ResourceVersion }
	step := func(what, result string, changed bool) {
		t.Helper()
		out := f.Evaluate(t, f.NS, "app")
		if out.Result != result || out.Changed != changed {
			t.Errorf("%s: %+v, want %s (changed %v)", what, out, result, changed)
		}
	}

	step("first", reconcile.PolicySucceeded, true)
	written := rv()
	step("again", reconcile.PolicyUnchanged, false)
	if rv() != written {
		t.Error("an unchanged evaluation wrote the status")
	}

	token := testenv.RequestToken(time.Now())
	if _, err := f.Kube.Policies.RequestReconcile(ctx, f.NS, "app", token); err != nil {
		t.Fatal(err)
	}
	step("reconcile requested", reconcile.PolicySucceeded, false)
	if got := f.Get(t, f.NS, "app").Status.LastHandledReconcileAt; got != token {
		t.Errorf("lastHandledReconcileAt %q, want %q", got, token)
	}
	step("request handled", reconcile.PolicyUnchanged, false)

	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	step("new revision", reconcile.PolicySucceeded, true)
	f.Edit(t, f.NS, "app", func(s *v1.ImagePolicySpec) { s.Policy = evaltest.Semver("~1.0") })
	step("new generation", reconcile.PolicySucceeded, true)
	step("settled", reconcile.PolicyUnchanged, false)

	written = rv()
	f.Ev = f.Evaluator(t)
	step("restarted", reconcile.PolicySucceeded, false)
	if rv() != written {
		t.Error("a restarted evaluator rewrote an unchanged status")
	}

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(f.Logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["name"] == "app" && m["namespace"] == f.NS {
			lines = append(lines, m)
		}
	}
	if len(lines) != 8 {
		t.Fatalf("%d log lines for 8 evaluations", len(lines))
	}
	if last := lines[7]; last["outcome"] != reconcile.PolicySucceeded || last["latest"] != "1.0.0" || last["duration"] == nil {
		t.Errorf("log line %v", last)
	}
}

// TestEvaluateIntegrationSuspended: a suspended policy is left exactly as it is.
func TestEvaluateIntegrationSuspended(t *testing.T) {
	f := newEvalFixture(t)
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*"), Suspend: true})
	before := f.Get(t, f.NS, "app")
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySuspended {
		t.Errorf("outcome %+v", out)
	}
	if after := f.Get(t, f.NS, "app"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("suspended policy written: %+v", after.Status)
	}
	// A reconcile request is acknowledged, as Flux does, and nothing else is written.
	if _, err := f.Kube.Policies.RequestReconcile(context.Background(), f.NS, "app", "while-paused"); err != nil {
		t.Fatal(err)
	}
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySuspended {
		t.Errorf("suspended with a request: %+v", out)
	}
	after := f.Get(t, f.NS, "app")
	if after.Status.LastHandledReconcileAt != "while-paused" || after.Status.LatestRef != nil || len(after.Status.Conditions) != 0 {
		t.Errorf("suspended with a request: status %+v", after.Status)
	}
	if out := f.Evaluate(t, f.NS, "gone"); out.Result != reconcile.PolicyNotFound {
		t.Errorf("missing policy: %+v", out)
	}
}

// TestEvaluateIntegrationRefusingSinkIsNotFatal: a sink that does not acknowledge
// LatestChanged is logged; the status is written all the same.
func TestEvaluateIntegrationRefusingSinkIsNotFatal(t *testing.T) {
	f := newEvalFixture(t)
	f.Sink = evaltest.NewLatestSink(t, http.StatusServiceUnavailable)
	f.Ev = f.Evaluator(t)
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*")})
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || !out.Changed {
		t.Errorf("outcome %+v", out)
	}
	evaltest.CheckReady(t, f.Get(t, f.NS, "app"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "resolved to 1.0.0", Stalled: false})
	if !strings.Contains(f.Logs.String(), "announcing a new latest image") {
		t.Errorf("refusal not logged: %s", f.Logs)
	}
}

// TestEvaluateIntegrationRepository evaluates every policy of one repository, in any
// namespace, through paginated lists, and leaves the policies of other repositories alone.
//
// It runs twice: without and with the policies kept by a watch (Evaluator.Policies), which an
// event without a delta does not use: both list them from the apiserver's watch cache.
func TestEvaluateIntegrationRepository(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) { testEvaluateRepository(t, cached) })
	}
}

func testEvaluateRepository(t *testing.T, cached bool) {
	f := newEvalFixture(t)
	f.Ev.PageSize = 2
	// The evaluator's client counts its lists of ImagePolicies.
	var lists atomic.Int64
	f.Ev.Kube = f.Env.ClientSeeing(t, nil, func(req *http.Request) {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/"+v1.ImagePolicyResource) {
			lists.Add(1)
		}
	})
	var copies *kube.Cache[*v1.ImagePolicy]
	if cached {
		copies = kube.NewCache(f.Kube.Policies, map[string]func(*v1.ImagePolicy) string{
			reconcile.RepositoryIndex: reconcile.PolicyRepository,
		})
		copies.Start(t.Context())
		t.Cleanup(copies.Stop)
		f.Ev.Policies = copies
	}
	// hold waits until the apiserver's watch cache, and the copies when there are, hold the
	// policies as they are now.
	hold := func(policies ...string) {
		t.Helper()
		f.Cached(t, policies...)
		if copies == nil {
			return
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			for _, key := range policies {
				ns, name, _ := strings.Cut(key, "/")
				want := f.Get(t, ns, name).ResourceVersion
				if got, ok := copies.Get(ns, name); !ok || got.ResourceVersion != want {
					return fmt.Errorf("the copy of %s is not at %s yet", key, want)
				}
			}
			return nil
		})
	}
	blue := f.Env.Namespace(t, map[string]string{"team": "blue"})
	red := f.Env.Namespace(t, map[string]string{"team": "red"})
	f.Repo(t, f.NS, "shared", "ghcr.io/org/shared", func(r *v1.ImageRepository) {
		r.Spec.AccessFrom = &v1.AccessFrom{NamespaceSelectors: []v1.NamespaceSelector{{MatchLabels: map[string]string{"team": "blue"}}}}
	})
	f.Repo(t, f.NS, "other", "ghcr.io/org/other")
	f.Put(t, f.NS, "shared", "1.0.0", "1.1.0", "2.0.0")
	f.Put(t, f.NS, "other", "1.0.0")
	cross := v1.NamespacedObjectReference{Namespace: f.NS, Name: "shared"}
	f.Policy(t, f.NS, "a", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("shared"), Policy: evaltest.Semver("1.x")})
	f.Policy(t, f.NS, "b", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("shared"), Policy: evaltest.Semver("*")})
	f.Policy(t, f.NS, "c", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("other"), Policy: evaltest.Semver("*")})
	f.Policy(t, blue, "d", v1.ImagePolicySpec{ImageRepositoryRef: cross, Policy: evaltest.Alphabetical(v1.OrderDesc)})
	f.Policy(t, red, "e", v1.ImagePolicySpec{ImageRepositoryRef: cross, Policy: evaltest.Semver("*")})
	f.Policy(t, blue, "f", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("shared"), Policy: evaltest.Semver("*")})
	hold(f.NS+"/a", f.NS+"/b", f.NS+"/c", blue+"/d", red+"/e", blue+"/f")

	outs, err := f.Ev.EvaluateRepository(context.Background(), f.NS, "shared")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range outs {
		s := o.Namespace + "/" + o.Name + " " + o.Result
		if o.Latest != nil {
			s += " " + o.Latest.Tag
		}
		if o.Reason != "" {
			s += " " + o.Reason
		}
		got = append(got, s)
	}
	slices.Sort(got)
	want := []string{
		f.NS + "/a succeeded 1.1.0",
		f.NS + "/b succeeded 2.0.0",
		blue + "/d succeeded 1.0.0",
		red + "/e failed AccessDenied",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("outcomes\n%q\nwant\n%q", got, want)
	}
	if p := f.Get(t, f.NS, "c"); len(p.Status.Conditions) != 0 {
		t.Errorf("a policy of another repository was evaluated: %+v", p.Status)
	}
	if p := f.Get(t, blue, "f"); len(p.Status.Conditions) != 0 {
		t.Errorf("a policy of a same-named repository in its own namespace was evaluated: %+v", p.Status)
	}

	// The second pass is about the same tags once the cache holds the statuses just written.
	hold(f.NS+"/a", f.NS+"/b", blue+"/d", red+"/e")
	outs, err = f.Ev.EvaluateRepository(context.Background(), f.NS, "shared")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if o.Result == reconcile.PolicySucceeded {
			t.Errorf("second pass with the same tags evaluated %s/%s again", o.Namespace, o.Name)
		}
	}
	// With watched copies that hold the repository's policies, no event lists them.
	switch n := lists.Load(); {
	case cached && n != 0:
		t.Errorf("the evaluations listed the ImagePolicies %d times though the watched copies held them", n)
	case !cached && n == 0:
		t.Error("the evaluations without watched copies did not list the ImagePolicies")
	}
}

// TestEvaluateIntegrationConcurrentReplicas: two processes evaluating the same policies at once
// (Knative runs several replicas) conflict on their status writes; the loser starts over from
// the winner's status, and both end at the same latestRef without errors.
func TestEvaluateIntegrationConcurrentReplicas(t *testing.T) {
	f := newEvalFixture(t)
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	for i := range 4 {
		f.Policy(t, f.NS, fmt.Sprintf("p%d", i), v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*")})
	}
	f.Cached(t, f.NS+"/p0", f.NS+"/p1", f.NS+"/p2", f.NS+"/p3")
	replicas := []*reconcile.Evaluator{f.Evaluator(t), f.Evaluator(t)}
	tags := []string{"1.0.0"}
	for round := 1; round <= 5; round++ {
		tags = append(tags, fmt.Sprintf("1.%d.0", round))
		f.Put(t, f.NS, "app", tags...)
		errs := make(chan error, len(replicas))
		for _, ev := range replicas {
			go func() {
				_, err := ev.EvaluateRepository(context.Background(), f.NS, "app")
				errs <- err
			}()
		}
		for range replicas {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for i := range 4 {
			p := f.Get(t, f.NS, fmt.Sprintf("p%d", i))
			want := fmt.Sprintf("1.%d.0", round)
			if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != want {
				t.Fatalf("round %d, p%d: latestRef %s, want %s", round, i, evaltest.RefString(p.Status.LatestRef), want)
			}
			if round > 1 && (p.Status.ObservedPreviousRef == nil || p.Status.ObservedPreviousRef.Tag != fmt.Sprintf("1.%d.0", round-1)) {
				t.Errorf("round %d, p%d: observedPreviousRef %s", round, i, evaltest.RefString(p.Status.ObservedPreviousRef))
			}
		}
	}
}
