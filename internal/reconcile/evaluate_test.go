package reconcile

import (
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/store"
)

// evaluatedStatus is the status that an evaluation of pol without spec.verify leaves, decided
// as Evaluator.decidePolicy decides it, without its reads: repo is the ImageRepository referred
// to (nil: it does not exist), tags the tags stored for it (nil: none stored). Its digest
// policy must not ask the registry.
func evaluatedStatus(t *testing.T, pol *v1.ImagePolicy, repo *v1.ImageRepository, tags []string) (string, *v1.ImagePolicy) {
	if repo == nil {
		return applied(failed(pol, repositoryMissing(pol.RepositoryNamespace(), pol.Spec.ImageRepositoryRef.Name)))
	}
	_, sel, bad := specOf(pol, repo)
	if bad != nil {
		return applied(failed(pol, *bad))
	}
	if tags == nil {
		return applied(failed(pol, noTagsFailure(repo, store.ErrNotFound)))
	}
	reg := &registryAnswers{t: t}
	return applied(reg.settle(decisionInput{pol: pol, token: pol.Annotations[v1.ReconcileRequestAnnotation], repo: repo,
		sel: sel, view: storedView(&store.Entry{Tags: tags, Revision: "rev"}), known: newKnowledge()}))
}

// TestEvaluateRules is the specification of one evaluation without spec.verify: each case is a
// repository (or none), its stored tags (or none), a policy whose status already holds a
// latestRef, and the status the evaluation must leave. TestEvaluateIntegrationRules runs some
// of them through the apiserver and the tag store.
func TestEvaluateRules(t *testing.T) {
	const image = "ghcr.io/org/app"
	prior := func() *v1.ImageRef { return &v1.ImageRef{Name: image, Tag: "0.0.1"} }
	semver := func(r string) v1.ImagePolicyChoice { return v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: r}} }
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
		request string // a reconcile request the policy carries
	}{
		{name: "semver", tags: []string{"1.0.0", "1.2.0", "2.0.0-rc.1", "latest"},
			spec:   v1.ImagePolicySpec{Policy: semver(">=1.0.0")},
			result: PolicySucceeded, tag: "1.2.0", reason: v1.SucceededReason,
			message: "Latest image tag for 'ghcr.io/org/app' updated from 0.0.1 to 1.2.0"},
		{name: "semver-prerelease", tags: []string{"1.0.0", "1.2.0", "2.0.0-rc.1"},
			spec:   v1.ImagePolicySpec{Policy: semver(">=1.0.0-0")},
			result: PolicySucceeded, tag: "2.0.0-rc.1", reason: v1.SucceededReason,
			message: "updated from 0.0.1 to 2.0.0-rc.1"},
		{name: "alphabetical-desc", tags: []string{"beta", "alpha", "gamma"},
			spec:   v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{Order: v1.OrderDesc}}},
			result: PolicySucceeded, tag: "alpha", reason: v1.SucceededReason, message: "updated from 0.0.1 to alpha"},
		{name: "numerical", tags: []string{"1", "10", "9"},
			spec:   v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: v1.OrderAsc}}},
			result: PolicySucceeded, tag: "10", reason: v1.SucceededReason, message: "updated from 0.0.1 to 10"},
		{name: "filter-extract", tags: []string{"main-3-abc", "main-10-def", "dev-20-xyz"},
			spec: v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: v1.OrderAsc}},
				FilterTags: &v1.TagFilter{Pattern: `^main-(?P<n>\d+)-`, Extract: "$n"}},
			result: PolicySucceeded, tag: "main-10-def", reason: v1.SucceededReason, message: "updated from 0.0.1 to main-10-def"},
		{name: "same-tag-again", tags: []string{"0.0.1"},
			spec:   v1.ImagePolicySpec{Policy: semver("*")},
			result: PolicySucceeded, tag: "0.0.1", reason: v1.SucceededReason, message: "resolved to 0.0.1"},
		{name: "missing-repository", noRepo: true, tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("*")},
			result: PolicyFailed, reason: v1.DependencyNotReadyReason, message: "does not exist"},
		{name: "never-scanned",
			spec:   v1.ImagePolicySpec{Policy: semver("*")},
			result: PolicyFailed, reason: v1.DependencyNotReadyReason, message: "no tags in the tag store"},
		{name: "no-tags", tags: []string{},
			spec:   v1.ImagePolicySpec{Policy: semver("*")},
			result: PolicyFailed, reason: v1.DependencyNotReadyReason, message: "no tags in the tag store"},
		{name: "no-candidates", tags: []string{"1.0.0", "1.2.0"},
			spec:   v1.ImagePolicySpec{Policy: semver(">=5.0.0")},
			result: PolicyFailed, reason: v1.FailureReason, message: "no candidate tags"},
		{name: "filter-drops-all", tags: []string{"1.0.0", "1.2.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("*"), FilterTags: &v1.TagFilter{Pattern: "^release-"}},
			result: PolicyFailed, reason: v1.FailureReason, message: "matches filterTags pattern"},
		{name: "numerical-unparsable", tags: []string{"1", "2", "two"},
			spec:   v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: v1.OrderAsc}}},
			result: PolicyFailed, reason: v1.FailureReason, message: `"two"`},
		{name: "invalid-range", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("not a range")},
			result: PolicyStalled, reason: v1.InvalidPolicyReason, message: "invalid policy", stalled: true},
		{name: "invalid-pattern", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("*"), FilterTags: &v1.TagFilter{Pattern: "("}},
			result: PolicyStalled, reason: v1.InvalidPolicyReason, message: "invalid policy", stalled: true},
		{name: "invalid-image", image: "https://ghcr.io/org/app", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("*")},
			result: PolicyStalled, reason: v1.ImageURLInvalidReason, message: "URL scheme", stalled: true},
		{name: "invalid-image-checked-before-the-spec", image: "https://ghcr.io/org/app", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("not a range")},
			result: PolicyStalled, reason: v1.ImageURLInvalidReason, message: "URL scheme", stalled: true},
		{name: "a request handled by a success", request: "r2", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("*")},
			result: PolicySucceeded, tag: "1.0.0", reason: v1.SucceededReason, message: "updated from 0.0.1 to 1.0.0"},
		{name: "a request handled by a failure", request: "r2", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver(">=2.0.0")},
			result: PolicyFailed, reason: v1.FailureReason, message: "no candidate tags"},
		{name: "a request handled by a stall", request: "r2", tags: []string{"1.0.0"},
			spec:   v1.ImagePolicySpec{Policy: semver("not a range")},
			result: PolicyStalled, reason: v1.InvalidPolicyReason, message: "invalid policy", stalled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := image
			if tc.image != "" {
				img = tc.image
			}
			var repo *v1.ImageRepository
			if !tc.noRepo {
				repo = &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: tc.name, UID: "r1"},
					Spec: v1.ImageRepositorySpec{Image: img}}
			}
			spec := tc.spec
			spec.ImageRepositoryRef = v1.NamespacedObjectReference{Name: tc.name}
			pol := &v1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: tc.name, Generation: 1},
				Spec: spec, Status: v1.ImagePolicyStatus{LatestRef: prior()}}
			pol.Status.LastHandledReconcileAt = "r1"
			if tc.request != "" {
				pol.Annotations = map[string]string{v1.ReconcileRequestAnnotation: tc.request}
			}

			result, p := evaluatedStatus(t, pol, repo, tc.tags)
			if result != tc.result {
				t.Errorf("result %q, want %q", result, tc.result)
			}
			status := metav1.ConditionFalse
			if tc.tag != "" {
				status = metav1.ConditionTrue
			}
			checkPolicyReady(t, p, readyWant{status, tc.reason, tc.message, tc.stalled})
			want := prior()
			switch {
			case tc.tag == "":
				if p.Status.ObservedPreviousRef != nil {
					t.Errorf("a failure set observedPreviousRef %s", p.Status.ObservedPreviousRef)
				}
			case tc.tag == prior().Tag:
				if p.Status.ObservedPreviousRef != nil {
					t.Errorf("the same latestRef set observedPreviousRef %s", p.Status.ObservedPreviousRef)
				}
			default:
				want = &v1.ImageRef{Name: img, Tag: tc.tag}
				if got := p.Status.ObservedPreviousRef; got == nil || *got != *prior() {
					t.Errorf("observedPreviousRef %v, want %s", got, prior())
				}
			}
			if got := p.Status.LatestRef; got == nil || *got != *want {
				t.Errorf("latestRef %v, want %s", got, want)
			}
			handled := "r1"
			if tc.request != "" {
				handled = tc.request
			}
			if got := p.Status.LastHandledReconcileAt; got != handled {
				t.Errorf("lastHandledReconcileAt %q, want %q", got, handled)
			}
		})
	}
}

// readyWant is the outcome checkPolicyReady expects: Ready's status and reason, a part of its
// message, and whether the policy is stalled.
type readyWant struct {
	status  metav1.ConditionStatus
	reason  string
	msg     string
	stalled bool
}

// checkPolicyReady checks the Ready, Reconciling and Stalled conditions of a policy as Flux's
// conventions set them for the outcome want; Reconciling is set on a failure that is retried.
func checkPolicyReady(t *testing.T, p *v1.ImagePolicy, want readyWant) {
	t.Helper()
	status, reason, msg, stalled := want.status, want.reason, want.msg, want.stalled
	ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition)
	if ready == nil {
		t.Fatalf("no Ready condition: %+v", p.Status)
	}
	if ready.Status != status || ready.Reason != reason || !strings.Contains(ready.Message, msg) {
		t.Errorf("Ready = %s %s %q, want %s %s containing %q", ready.Status, ready.Reason, ready.Message, status, reason, msg)
	}
	if ready.ObservedGeneration != p.Generation || p.Status.ObservedGeneration != p.Generation {
		t.Errorf("observed generation %d (Ready %d), want %d", p.Status.ObservedGeneration, ready.ObservedGeneration, p.Generation)
	}
	if got := apimeta.IsStatusConditionTrue(p.Status.Conditions, v1.StalledCondition); got != stalled {
		t.Errorf("Stalled = %v, want %v", got, stalled)
	}
	wantReconciling := status == metav1.ConditionFalse && !stalled
	if got := apimeta.IsStatusConditionTrue(p.Status.Conditions, v1.ReconcilingCondition); got != wantReconciling {
		t.Errorf("Reconciling = %v, want %v", got, wantReconciling)
	}
}

// TestAccessFromDenies carries the decisions of TestEvaluateIntegrationCrossNamespace: which
// namespaces an ImageRepository's accessFrom admits, as Flux decides it.
func TestAccessFromDenies(t *testing.T) {
	repo := func(from *v1.AccessFrom) *v1.ImageRepository {
		return &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "app"},
			Spec: v1.ImageRepositorySpec{Image: "ghcr.io/org/app", AccessFrom: from}}
	}
	selectors := func(s ...map[string]string) *v1.AccessFrom {
		from := &v1.AccessFrom{}
		for _, l := range s {
			from.NamespaceSelectors = append(from.NamespaceSelectors, v1.NamespaceSelector{MatchLabels: l})
		}
		return from
	}
	blue, red := map[string]string{"team": "blue"}, map[string]string{"team": "red"}
	for _, tc := range []struct {
		name   string
		repo   *v1.ImageRepository
		ns     string
		labels map[string]string
		denial string // "" means admitted
	}{
		{"own namespace, no accessFrom", repo(nil), "shared", nil, ""},
		{"own namespace, accessFrom admits no other", repo(selectors(blue)), "shared", red, ""},
		{"another namespace, no accessFrom", repo(nil), "red", red,
			"'shared/app' can't be accessed due to missing ACL labels on 'accessFrom'"},
		{"an empty selector admits every namespace", repo(selectors(nil)), "red", red, ""},
		{"an empty selector admits a namespace without labels", repo(selectors(nil)), "plain", nil, ""},
		{"the second selector matches", repo(selectors(map[string]string{"team": "green"}, blue)), "blue", blue, ""},
		{"no selector matches", repo(selectors(map[string]string{"team": "green"}, blue)), "red", red,
			"'shared/app' can't be accessed due to ACL labels mismatch on namespace 'red'"},
		{"accessFrom without selectors admits none", repo(&v1.AccessFrom{}), "blue", blue,
			"'shared/app' can't be accessed due to ACL labels mismatch on namespace 'blue'"},
		{"every label of the selector must match", repo(selectors(map[string]string{"team": "blue", "env": "prod"})), "blue", blue,
			"ACL labels mismatch"},
		{"an invalid selector denies", repo(selectors(map[string]string{"team": "not valid!"})), "blue", blue,
			"invalid accessFrom selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := accessFromDenies(tc.repo, tc.ns, tc.labels)
			switch {
			case tc.denial == "" && got != nil:
				t.Errorf("denied: %v", got)
			case tc.denial != "" && (got == nil || !strings.Contains(got.Error(), tc.denial)):
				t.Errorf("denial %v, want one containing %q", got, tc.denial)
			}
		})
	}
}

// TestCrossNamespaceDenied checks the one answer a policy gets for every refusal: it names only
// what the policy names, whatever the reason.
func TestCrossNamespaceDenied(t *testing.T) {
	pol := &v1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "red", Name: "app"}}
	want := "failed to get the referred ImageRepository: access denied: ImageRepository 'shared/app' does not exist or its accessFrom does not admit namespace 'red'"
	if got := crossNamespaceDenied(pol, "shared", "app").Error(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestBlockedReference carries the decision of TestEvaluateIntegrationNoCrossNamespaceRefs:
// which references Flux's --no-cross-namespace-refs refuses, and with which message, before
// anything of the other namespace is read (so whether the repository exists does not enter).
func TestBlockedReference(t *testing.T) {
	const blocked = "failed to get the referred ImageRepository: cannot access 'ImageRepository/shared/app', cross-namespace references have been blocked"
	for _, tc := range []struct {
		name    string
		refNS   string // the imageRepositoryRef's namespace; "" means the policy's own
		noCross bool
		want    string // the refusal; "" means none
	}{
		{name: "another namespace, blocked", refNS: "shared", noCross: true, want: blocked},
		{name: "another namespace, allowed", refNS: "shared"},
		{name: "own namespace named, blocked", refNS: "red", noCross: true},
		{name: "own namespace implied, blocked", noCross: true},
		{name: "own namespace implied, allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := &v1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "red", Name: "app"},
				Spec: v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Namespace: tc.refNS, Name: "app"}}}
			err := blockedReference(pol, tc.noCross)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("refusal %v, want %q", err, tc.want)
			}
		})
	}
}

// TestKnownDigest carries the decisions of TestEvaluateIntegrationDigestReflection: when
// latestRef's digest is known without a HEAD to the registry.
func TestKnownDigest(t *testing.T) {
	const image = "ghcr.io/org/app"
	ref := func(tag, digest string) *v1.ImageRef { return &v1.ImageRef{Name: image, Tag: tag, Digest: digest} }
	for _, tc := range []struct {
		name    string
		reflect v1.ReflectionPolicy
		current *v1.ImageRef
		latest  *v1.ImageRef
		digest  string
		ask     bool
	}{
		{"Never has no digest", v1.ReflectNever, ref("1.0.0", "sha256:a"), ref("1.0.0", ""), "", false},
		{"Never for a new tag", v1.ReflectNever, nil, ref("1.1.0", ""), "", false},
		{"unset is Never", "", ref("1.0.0", "sha256:a"), ref("1.1.0", ""), "", false},
		{"IfNotPresent keeps the digest of the same tag", v1.ReflectIfNotPresent, ref("1.0.0", "sha256:a"), ref("1.0.0", ""), "sha256:a", false},
		{"IfNotPresent asks for a new tag", v1.ReflectIfNotPresent, ref("1.0.0", "sha256:a"), ref("1.1.0", ""), "", true},
		{"IfNotPresent asks when the tag has none", v1.ReflectIfNotPresent, ref("1.0.0", ""), ref("1.0.0", ""), "", true},
		{"IfNotPresent asks without a latestRef", v1.ReflectIfNotPresent, nil, ref("1.0.0", ""), "", true},
		{"IfNotPresent asks for another image", v1.ReflectIfNotPresent, &v1.ImageRef{Name: "ghcr.io/org/old", Tag: "1.0.0", Digest: "sha256:a"},
			ref("1.0.0", ""), "", true},
		{"Always asks for the same tag", v1.ReflectAlways, ref("1.0.0", "sha256:a"), ref("1.0.0", ""), "", true},
		{"Always asks for a new tag", v1.ReflectAlways, nil, ref("1.0.0", ""), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := &v1.ImagePolicy{Spec: v1.ImagePolicySpec{DigestReflectionPolicy: tc.reflect},
				Status: v1.ImagePolicyStatus{LatestRef: tc.current}}
			digest, ask := knownDigest(pol, tc.latest)
			if digest != tc.digest || ask != tc.ask {
				t.Errorf("knownDigest = %q, ask %v; want %q, ask %v", digest, ask, tc.digest, tc.ask)
			}
		})
	}
}

// TestSuccessEvents carries the Event decisions of TestEvaluateIntegrationPolicyEdited and of
// the verified selections' notes: which Events a successful evaluation records, from the Ready
// condition it found and the one it wrote.
func TestSuccessEvents(t *testing.T) {
	latest := &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.1.0"}
	resolved := "Latest image tag for 'ghcr.io/org/app' resolved to 1.1.0"
	const note = "1.2.0 skipped: no signature verifies"
	// after is what an evaluation that resolves latest with note records over a Ready
	// condition of status ready and message old.
	after := func(changed, ready bool, old, note string) successEvents {
		status := metav1.ConditionFalse
		if ready {
			status = metav1.ConditionTrue
		}
		st := &v1.ImagePolicyStatus{LatestRef: latest, Conditions: []metav1.Condition{
			{Type: v1.ReadyCondition, Status: status, Reason: v1.SucceededReason, Message: old}}}
		_, _, readyChanged := resolution{latest: latest, note: note, evaluated: v1.EvaluatedReason}.apply(st)
		return successEvents{changed: changed, wasReady: ready, readyChanged: readyChanged, note: note}
	}
	for _, tc := range []struct {
		name            string
		in              successEvents
		normal, warning bool
	}{
		{"a new latestRef", after(true, true, "before", ""), true, false},
		{"the same latestRef, Ready before", after(false, true, resolved, ""), false, false},
		{"the same latestRef, not Ready before", after(false, false, "no tags", ""), true, false},
		{"a new note", after(false, true, resolved, note), false, true},
		{"the same note again", after(false, true, resolved+"; "+note, note), false, false},
		{"the same note with a new latestRef", after(true, true, resolved+"; "+note, note), true, true},
		{"a note after a failure", after(false, false, "failed", note), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			normal, warning := tc.in.of()
			if normal != tc.normal || warning != tc.warning {
				t.Errorf("Normal %v, Warning %v; want %v, %v", normal, warning, tc.normal, tc.warning)
			}
		})
	}
}
