package reconcile

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/store"
)

// onPush is a policy as read and the push whose delta may advance it: the input of
// advancedLatest.
type onPush struct {
	pol   *v1.ImagePolicy
	token string         // the reconcile request pol's annotations carry, "" for none
	id    store.Identity // the identity of the repository's stored tag list
	image string         // the repository's spec.image
	d     *delta         // the push's verified delta, nil for none
}

// advancedLatest is the decision of a policy without spec.verify over p's delta view, as
// Evaluator.decidePolicy takes it: the latest image, or ok false when the stored list must
// decide instead (no delta of the list's identity, or the view cannot answer).
func advancedLatest(p onPush, sel *policy.Selector) (latest v1.ImageRef, ok bool) {
	if p.d == nil || p.d.id != p.id {
		return v1.ImageRef{}, false
	}
	repo := &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app"},
		Spec: v1.ImageRepositorySpec{Image: p.image}}
	d := decide(decisionInput{pol: p.pol, token: p.token, repo: repo, sel: sel, view: deltaView(p.d), known: newKnowledge()})
	if d.kind != decideSucceed {
		return v1.ImageRef{}, false
	}
	return *d.latest, true
}

// TestAdvanceDecision is the table of a policy's advance on a push: a policy as its last
// evaluation left it (evaluatedPolicy: app:1.0.0 from revision sha256:a, request r1 handled) and a
// verified delta in; the latest image, or a read of the store, out. The apiserver and the store
// are left out: TestAdvanceIntegration writes one advance and one refusal end to end.
func TestAdvanceDecision(t *testing.T) {
	const image = "ghcr.io/org/app"
	id := store.Identity{UID: "repo-uid", Image: image}
	semver := func(r string) v1.ImagePolicySpec {
		return v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: r}}}
	}
	alphabetical := func(order string) v1.ImagePolicySpec {
		return v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{Order: order}}}
	}
	numerical := func(order string) v1.ImagePolicySpec {
		return v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: order}}}
	}
	reflecting := func(spec v1.ImagePolicySpec, r v1.ReflectionPolicy) v1.ImagePolicySpec {
		spec.DigestReflectionPolicy = r
		return spec
	}
	filtered := func(spec v1.ImagePolicySpec, pattern, extract string) v1.ImagePolicySpec {
		spec.FilterTags = &v1.TagFilter{Pattern: pattern, Extract: extract}
		return spec
	}
	const timestamps = `^main-[a-f0-9]+-(?P<ts>[0-9]+)$`
	digest := func(tag string) string { return "sha256:digest-of-" + tag }
	ref := func(tag string, withDigest bool) v1.ImageRef {
		r := v1.ImageRef{Name: image, Tag: tag}
		if withDigest {
			r.Digest = digest(tag)
		}
		return r
	}
	tests := []struct {
		name    string
		spec    v1.ImagePolicySpec
		latest  v1.ImageRef   // the status's latestRef; zero means app:1.0.0
		added   []string      // the delta's tags, each with digest(tag)
		bare    []string      // the delta's tags without a digest
		edit    func(*onPush) // changes the policy, the request or the delta before the decision
		want    v1.ImageRef   // the advanced latestRef
		toStore bool          // the store must be read instead
	}{
		// The decision cases TestAdvanceIntegration held; it still writes the first end to end.
		{name: "an added tag wins, with its digest", spec: reflecting(semver(">=1.0.0"), v1.ReflectIfNotPresent),
			latest: ref("1.2.0", true), added: []string{"1.3.0", "0.9.0"}, want: ref("1.3.0", true)},
		{name: "an added tag that loses changes nothing", spec: alphabetical(v1.OrderAsc),
			latest: ref("c", false), added: []string{"a"}, want: ref("c", false)},
		{name: "another starting revision", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { p.d.from = "sha256:z" }, toStore: true},
		{name: "another identity", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { p.d.id.UID = "another-uid" }, toStore: true},
		{name: "spec edited", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { p.pol.Generation++ }, toStore: true},
		{name: "reconcile requested", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { p.token = "r2" }, toStore: true},

		// Whether the delta applies to the policy as read.
		{name: "no delta", spec: semver(">=1.0.0"), edit: func(p *onPush) { p.d = nil }, toStore: true},
		{name: "a delta of another image", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { p.d.id.Image = "ghcr.io/org/other" }, toStore: true},
		{name: "the repository's image edited", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { p.image = "ghcr.io/org/other" }, toStore: true},
		{name: "no request ever made", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { p.token = ""; p.pol.Status.LastHandledReconcileAt = "" }, want: ref("1.3.0", false)},
		{name: "last evaluation failed", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { condition(p.pol, v1.ReadyCondition).Status = metav1.ConditionFalse }, toStore: true},
		{name: "revision read under an older generation", spec: semver(">=1.0.0"), added: []string{"1.3.0"},
			edit: func(p *onPush) { condition(p.pol, v1.TagsEvaluatedCondition).ObservedGeneration = 1 }, toStore: true},

		// What Advance cannot answer from latestRef and the added tags.
		{name: "latest tag outside the grammar", spec: alphabetical(v1.OrderAsc),
			latest: ref("zz\u202e", false), added: []string{"a1"}, toStore: true},
		{name: "an added tag the rule cannot order", spec: numerical(v1.OrderAsc),
			latest: ref("2", false), added: []string{"two"}, toStore: true},
		{name: "a winning tag without its digest", spec: reflecting(semver(">=1.0.0"), v1.ReflectIfNotPresent),
			latest: ref("1.0.0", true), bare: []string{"1.1.0"}, toStore: true},
		{name: "Always: latest stays, its digest due again", spec: reflecting(semver(">=1.0.0"), v1.ReflectAlways),
			latest: ref("1.0.0", true), added: []string{"0.9.0"}, toStore: true},

		// The digest each reflection policy takes.
		{name: "Never: the tag without a digest", spec: semver(">=1.0.0"), bare: []string{"1.1.0"}, want: ref("1.1.0", false)},
		{name: "Never: a known digest is not taken", spec: semver(">=1.0.0"), added: []string{"1.1.0"}, want: ref("1.1.0", false)},
		{name: "IfNotPresent: latest stays with its digest", spec: reflecting(semver(">=1.0.0"), v1.ReflectIfNotPresent),
			latest: ref("1.0.0", true), added: []string{"0.9.0"}, want: ref("1.0.0", true)},
		{name: "Always: a winning tag with its digest", spec: reflecting(semver(">=1.0.0"), v1.ReflectAlways),
			latest: ref("1.0.0", true), added: []string{"1.1.0"}, want: ref("1.1.0", true)},

		// Each kind of rule, one added tag that wins and one that loses.
		{name: "semver: the best of several added", spec: semver(">=1.0.0"), added: []string{"1.1.0", "1.4.0", "1.2.0"}, want: ref("1.4.0", false)},
		{name: "semver: outside the range", spec: semver("1.x"), added: []string{"2.0.0"}, want: ref("1.0.0", false)},
		{name: "semver: a prerelease the range leaves out", spec: semver(">=1.0.0"), added: []string{"1.1.0-rc.1"}, want: ref("1.0.0", false)},
		{name: "semver: a prerelease the range admits", spec: semver(">=1.0.0-0"), added: []string{"1.1.0-rc.1"}, want: ref("1.1.0-rc.1", false)},
		{name: "semver: not a version", spec: semver(">=1.0.0"), added: []string{"latest"}, want: ref("1.0.0", false)},
		{name: "alphabetical desc: an earlier tag wins", spec: alphabetical(v1.OrderDesc),
			latest: ref("b", false), added: []string{"a"}, want: ref("a", false)},
		{name: "alphabetical desc: a later tag loses", spec: alphabetical(v1.OrderDesc),
			latest: ref("b", false), added: []string{"c"}, want: ref("b", false)},
		{name: "numerical: by value, not by text", spec: numerical(v1.OrderAsc),
			latest: ref("9", false), added: []string{"10"}, want: ref("10", false)},
		{name: "numerical: a smaller number loses", spec: numerical(v1.OrderAsc),
			latest: ref("9", false), added: []string{"8"}, want: ref("9", false)},
		{name: "numerical desc: a smaller number wins", spec: numerical(v1.OrderDesc),
			latest: ref("3", false), added: []string{"2"}, want: ref("2", false)},
		{name: "extract: a later timestamp wins", spec: filtered(numerical(v1.OrderAsc), timestamps, "$ts"),
			latest: ref("main-a-10", false), added: []string{"main-b-12"}, want: ref("main-b-12", false)},
		{name: "extract: a tag the filter drops", spec: filtered(numerical(v1.OrderAsc), timestamps, "$ts"),
			latest: ref("main-a-10", false), added: []string{"dev-99"}, want: ref("main-a-10", false)},
		{name: "filter: a tag it drops loses however it sorts", spec: filtered(alphabetical(v1.OrderAsc), "^main-", ""),
			latest: ref("main-b", false), added: []string{"zeta", "main-a"}, want: ref("main-b", false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
				p.Spec = tt.spec
				if tt.latest != (v1.ImageRef{}) {
					p.Status.LatestRef = &tt.latest
				}
			})
			d := &delta{id: id, from: "sha256:a", to: "sha256:b", digests: map[string]string{}}
			for _, tag := range tt.added {
				d.tags, d.digests[tag] = append(d.tags, tag), digest(tag)
			}
			d.tags = append(d.tags, tt.bare...)
			in := onPush{pol: pol, token: "r1", id: id, image: image, d: d}
			if tt.edit != nil {
				tt.edit(&in)
			}
			sel, err := policy.NewSelector(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := advancedLatest(in, sel)
			switch {
			case tt.toStore && ok:
				t.Fatalf("advanced to %+v; want a read of the store", got)
			case !tt.toStore && !ok:
				t.Fatalf("not advanced; want %+v", tt.want)
			case !tt.toStore && got != tt.want:
				t.Fatalf("advanced to %+v, want %+v", got, tt.want)
			}
		})
	}
}
