package reconcile

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
)

// registryAnswers stands for the registry and the verifier of decisions taken without I/O: the
// digest of each tag, and the verdict on each digest ("" verifies, else why not). A lookup it
// holds no answer for fails the test.
type registryAnswers struct {
	t        testing.TB
	digests  map[string]string
	verdicts map[string]string
	// fail makes the lookups it names fail with its error: "digest <tag>" or "verdict <tag>".
	fail map[string]error
	// asked lists the lookups asked for, in order: "digest <tag>" ("digest! <tag>" when fresh),
	// "verdict <tag>", and last, when the decision asks for another view, "policy" or "stored list".
	asked []string
}

// settle decides in as lookups.settle does, answering its lookups from r: the decision once it
// answers or asks for another view.
func (r *registryAnswers) settle(in decisionInput) decision {
	r.t.Helper()
	for range maxLookups + 1 {
		d := decide(in)
		if d.kind != decideNeeds {
			return d
		}
		asked := map[lookupKind]string{lookupDigest: "digest " + d.need.tag, lookupVerdict: "verdict " + d.need.tag,
			lookupPolicy: "policy", lookupStoredList: "stored list"}[d.need.kind]
		if d.need.kind == lookupDigest && d.need.fresh {
			asked = "digest! " + d.need.tag
		}
		r.asked = append(r.asked, asked)
		if err := r.fail[strings.Replace(asked, "digest!", "digest", 1)]; err != nil {
			in.known.err = err
			continue
		}
		switch d.need.kind {
		case lookupDigest:
			digest, ok := r.digests[d.need.tag]
			if !ok {
				r.t.Errorf("the digest of %q was asked for", d.need.tag)
				in.known.err = errors.New("no such tag")
				continue
			}
			in.known.learnDigest(d.need.tag, digest)
		case lookupVerdict:
			why, ok := r.verdicts[d.need.digest]
			if !ok {
				r.t.Errorf("the verdict on %q (%s) was asked for", d.need.digest, d.need.tag)
				in.known.err = errors.New("no verdict")
				continue
			}
			in.known.learnVerdict(d.need.digest, verdict{ok: why == "", reason: why})
		default:
			return d
		}
	}
	r.t.Fatalf("the decision of %s/%s asked for more than %d lookups", in.pol.Namespace, in.pol.Name, maxLookups)
	return decision{}
}

// applied is the result and the status of the policy that the writer leaves after d, a success,
// a failure or a refusal that the status does not already report.
func applied(d decision) (string, *v1.ImagePolicy) {
	out := d.pol.DeepCopy()
	switch d.kind {
	case decideSucceed:
		resolutionOf(d.pol, d.latest, d.inputs, d.skipped).apply(&out.Status)
		return PolicySucceeded, out
	case decideFail, decideRefuse:
		token := out.Annotations[v1.ReconcileRequestAnnotation]
		failedStatus{generation: out.Generation, request: token, reason: d.fail.reason, stalled: d.fail.stalled,
			message: failureMessage(d.fail.cause)}.apply(policyFields(out))
		if d.fail.stalled {
			return PolicyStalled, out
		}
		return PolicyFailed, out
	}
	return "", out
}

// TestDecideLookups is the table of what a decision asks the registry and the verifier, in
// which order, and what it answers with their answers: a policy as its last evaluation left it
// (evaluatedPolicy: app:1.0.0 from revision sha256:a, request r1 handled), its spec, and either
// the stored list or a push's delta from sha256:a; the lookups and the answer out. Which
// requests those lookups cost, from memory or the registry, is the evaluator's part
// (TestEvaluateIntegrationDigestReflection, internal/verifytest).
func TestDecideLookups(t *testing.T) {
	const image = "ghcr.io/org/app"
	digest := func(tag string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(tag))) }
	spec := func(r v1.ReflectionPolicy, verify bool) v1.ImagePolicySpec {
		s := v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: ">=1.0.0"}}, DigestReflectionPolicy: r}
		if verify {
			s.Verify = &v1.OCIRepositoryVerification{Provider: "cosign"}
		}
		return s
	}
	refused := errors.New("connection refused")
	denied := &registry.Error{Reason: v1.AuthenticationFailedReason, Err: errors.New("401 Unauthorized")}
	tests := []struct {
		name     string
		spec     v1.ImagePolicySpec
		latest   string            // latestRef's digest; "" for none
		stored   []string          // the stored list; nil for the delta view
		added    []string          // the delta's tags, each with its digest
		bare     []string          // the delta's tags without a digest
		verdicts map[string]string // by tag: "" verifies, else why not
		valid    bool              // this process remembers latestRef's digest with a valid signature
		edit     func(*v1.ImagePolicy)
		fail     map[string]error
		asked    []string
		kind     decisionKind
		tag      string // the latest tag of a success
		digest   bool   // latestRef carries the tag's digest
		skipped  []string
		reason   string // a failure's
	}{
		// A policy without spec.verify, from the stored list.
		{name: "Never asks for nothing", spec: spec(v1.ReflectNever, false), stored: []string{"1.0.0", "1.1.0"},
			kind: decideSucceed, tag: "1.1.0"},
		{name: "IfNotPresent asks for the new tag's digest", spec: spec(v1.ReflectIfNotPresent, false), latest: "sha256:old",
			stored: []string{"1.0.0", "1.1.0"}, asked: []string{"digest! 1.1.0"}, kind: decideSucceed, tag: "1.1.0", digest: true},
		{name: "IfNotPresent keeps the digest it has", spec: spec(v1.ReflectIfNotPresent, false), latest: "sha256:old",
			stored: []string{"1.0.0"}, kind: decideSucceed, tag: "1.0.0"},
		{name: "Always asks again for the same tag", spec: spec(v1.ReflectAlways, false), latest: "sha256:old",
			stored: []string{"1.0.0"}, asked: []string{"digest! 1.0.0"}, kind: decideSucceed, tag: "1.0.0", digest: true},
		{name: "a digest the registry refuses keeps latestRef", spec: spec(v1.ReflectIfNotPresent, false),
			stored: []string{"1.0.0", "1.1.0"}, fail: map[string]error{"digest 1.1.0": denied},
			asked: []string{"digest! 1.1.0"}, kind: decideFail, reason: v1.AuthenticationFailedReason},

		// A policy with spec.verify, from the stored list.
		{name: "verified: each candidate's digest, then its verdict, best first", spec: spec(v1.ReflectNever, true),
			stored: []string{"1.0.0", "1.1.0", "1.2.0"}, verdicts: map[string]string{"1.2.0": "not signed", "1.1.0": ""},
			asked: []string{"digest 1.2.0", "verdict 1.2.0", "digest 1.1.0", "verdict 1.1.0"},
			kind:  decideSucceed, tag: "1.1.0", skipped: []string{"1.2.0"}},
		{name: "verified: IfNotPresent takes the digest verified", spec: spec(v1.ReflectIfNotPresent, true),
			stored: []string{"1.0.0", "1.1.0"}, verdicts: map[string]string{"1.1.0": ""},
			asked: []string{"digest 1.1.0", "verdict 1.1.0"}, kind: decideSucceed, tag: "1.1.0", digest: true},
		{name: "verified: Always never takes a digest from memory", spec: spec(v1.ReflectAlways, true),
			stored: []string{"1.0.0", "1.1.0"}, verdicts: map[string]string{"1.1.0": ""},
			asked: []string{"digest! 1.1.0", "verdict 1.1.0"}, kind: decideSucceed, tag: "1.1.0", digest: true},
		{name: "verified: a verifier that cannot read the registry keeps latestRef", spec: spec(v1.ReflectNever, true),
			stored: []string{"1.0.0", "1.1.0", "1.2.0"}, verdicts: map[string]string{"1.2.0": "not signed"},
			fail:  map[string]error{"verdict 1.1.0": refused},
			asked: []string{"digest 1.2.0", "verdict 1.2.0", "digest 1.1.0", "verdict 1.1.0"},
			kind:  decideFail, reason: v1.ReadOperationFailedReason},
		{name: "verified: a digest the registry refuses keeps latestRef", spec: spec(v1.ReflectNever, true),
			stored: []string{"1.0.0", "1.1.0"}, fail: map[string]error{"digest 1.1.0": denied},
			asked: []string{"digest 1.1.0"}, kind: decideFail, reason: v1.AuthenticationFailedReason},

		// The delta view.
		{name: "delta: answered without lookups", spec: spec(v1.ReflectNever, false), added: []string{"1.1.0"},
			kind: decideSucceed, tag: "1.1.0"},
		{name: "delta: the winning tag's digest comes with the delta", spec: spec(v1.ReflectIfNotPresent, false),
			latest: "sha256:old", added: []string{"1.1.0"}, kind: decideSucceed, tag: "1.1.0", digest: true},
		{name: "delta: a waiting request asks for a fresher read of the policy", spec: spec(v1.ReflectNever, false),
			added: []string{"1.1.0"}, edit: func(p *v1.ImagePolicy) { p.Annotations[v1.ReconcileRequestAnnotation] = "r2" },
			asked: []string{"policy"}, kind: decideNeeds},
		{name: "delta: a winning tag without its digest needs the stored list", spec: spec(v1.ReflectIfNotPresent, false),
			latest: "sha256:old", bare: []string{"1.1.0"}, asked: []string{"stored list"}, kind: decideNeeds},
		{name: "delta, verified: only the added tags above latestRef are verified", spec: spec(v1.ReflectNever, true), valid: true,
			added: []string{"1.2.0", "1.1.0", "0.9.0"}, verdicts: map[string]string{"1.2.0": "not signed", "1.1.0": ""},
			asked: []string{"verdict 1.2.0", "verdict 1.1.0"}, kind: decideSucceed, tag: "1.1.0", skipped: []string{"1.2.0"}},
		{name: "delta, verified: none verifies, latestRef stays with them skipped", spec: spec(v1.ReflectNever, true), valid: true,
			added: []string{"1.1.0"}, verdicts: map[string]string{"1.1.0": "not signed"},
			asked: []string{"verdict 1.1.0"}, kind: decideSucceed, tag: "1.0.0", skipped: []string{"1.1.0"}},
		{name: "delta, verified: latestRef not remembered to verify", spec: spec(v1.ReflectNever, true),
			added: []string{"1.1.0"}, asked: []string{"stored list"}, kind: decideNeeds},
		{name: "delta, verified: a verdict that cannot be had", spec: spec(v1.ReflectNever, true), valid: true,
			added: []string{"1.1.0"}, fail: map[string]error{"verdict 1.1.0": refused},
			asked: []string{"verdict 1.1.0", "stored list"}, kind: decideNeeds},
		{name: "delta, verified: the last evaluation skipped tags", spec: spec(v1.ReflectNever, true), valid: true,
			added: []string{"1.1.0"}, edit: func(p *v1.ImagePolicy) {
				condition(p, v1.TagsEvaluatedCondition).Reason = v1.SkippedUnverifiedReason
			}, asked: []string{"stored list"}, kind: decideNeeds},
		{name: "delta, verified: an added tag without its digest", spec: spec(v1.ReflectNever, true), valid: true,
			bare: []string{"1.1.0"}, asked: []string{"stored list"}, kind: decideNeeds},
		{name: "delta, verified: Always", spec: spec(v1.ReflectAlways, true), valid: true, latest: "sha256:old",
			added: []string{"1.1.0"}, asked: []string{"stored list"}, kind: decideNeeds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
				p.Spec = tt.spec
				p.Status.LatestRef.Digest = tt.latest
			})
			if tt.edit != nil {
				tt.edit(pol)
			}
			repo := &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app"},
				Spec: v1.ImageRepositorySpec{Image: image}}
			sel, err := policy.NewSelector(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			reg := &registryAnswers{t: t, digests: map[string]string{}, verdicts: map[string]string{}, fail: tt.fail}
			for _, tag := range append(append(slices.Clone(tt.stored), tt.added...), tt.bare...) {
				reg.digests[tag] = digest(tag)
			}
			for tag, why := range tt.verdicts {
				reg.verdicts[digest(tag)] = why
			}
			in := decisionInput{pol: pol, token: pol.Annotations[v1.ReconcileRequestAnnotation], repo: repo, sel: sel,
				known: newKnowledge()}
			if tt.spec.Verify != nil {
				in.verifier = "trusted-keys"
			}
			if tt.stored != nil {
				in.view = storedView(&store.Entry{Tags: tt.stored, Revision: "sha256:b"})
			} else {
				d := &delta{from: "sha256:a", to: "sha256:b", tags: append(slices.Clone(tt.added), tt.bare...), digests: map[string]string{}}
				for _, tag := range tt.added {
					d.digests[tag] = digest(tag)
				}
				in.view = deltaView(d)
			}
			if tt.valid {
				in.known.learnDigest("1.0.0", digest("1.0.0"))
				in.known.learnVerdict(digest("1.0.0"), verdict{ok: true})
			}
			got := reg.settle(in)
			if !slices.Equal(reg.asked, tt.asked) {
				t.Errorf("asked %q, want %q", reg.asked, tt.asked)
			}
			if got.kind != tt.kind {
				t.Fatalf("decided %d (%+v), want %d", got.kind, got.fail, tt.kind)
			}
			switch got.kind {
			case decideFail:
				if got.fail.reason != tt.reason {
					t.Errorf("failed with %s: %v; want %s", got.fail.reason, got.fail.cause, tt.reason)
				}
			case decideSucceed:
				want := v1.ImageRef{Name: image, Tag: tt.tag}
				switch {
				case tt.digest:
					want.Digest = digest(tt.tag)
				case tt.tag == "1.0.0":
					want.Digest = tt.latest
				}
				if *got.latest != want {
					t.Errorf("latest %+v, want %+v", *got.latest, want)
				}
				var skipped []string
				for _, s := range got.skipped {
					skipped = append(skipped, s.tag)
				}
				if !slices.Equal(skipped, tt.skipped) {
					t.Errorf("skipped %q, want %q", skipped, tt.skipped)
				}
				if got.inputs.revision != "sha256:b" {
					t.Errorf("revision %q, want sha256:b", got.inputs.revision)
				}
			}
		})
	}
}
