package reconcile

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/store"
)

// verifiedCase is a selection among verified tags: the stored tags, the verdict on each one
// checked ("" verifies, else why not), and the policy's spec.
type verifiedCase struct {
	tags     []string
	verdicts map[string]string
	spec     v1.ImagePolicySpec
}

// verifiedStatus decides as Evaluator.decidePolicy does over the stored list, the registry
// answering the digest and the verdict of each tag of c.verdicts: the candidates checked, and
// the result and status it leaves on a policy of generation 1 whose latestRef is app:0.0.1.
func verifiedStatus(t *testing.T, c verifiedCase) (checked int, result string, pol *v1.ImagePolicy) {
	const revision, image = "rev", "ghcr.io/org/app"
	reg := &registryAnswers{t: t, digests: map[string]string{}, verdicts: map[string]string{}}
	for tag, why := range c.verdicts {
		digest := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(tag)))
		reg.digests[tag], reg.verdicts[digest] = digest, why
	}
	pol = &v1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Generation: 1}, Spec: c.spec,
		Status: v1.ImagePolicyStatus{LatestRef: &v1.ImageRef{Name: image, Tag: "0.0.1"}}}
	repo := &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app"},
		Spec: v1.ImageRepositorySpec{Image: image}}
	sel, err := policy.NewSelector(c.spec)
	if err != nil {
		t.Fatal(err)
	}
	d := reg.settle(decisionInput{pol: pol, repo: repo, sel: sel, verifier: "trusted-keys",
		view: storedView(&store.Entry{Tags: c.tags, Revision: revision}), known: newKnowledge()})
	result, pol = applied(d)
	return d.checked, result, pol
}

// TestSelectVerified carries the decisions of the verified selections' integration tests
// (internal/verifytest): which tag a policy with spec.verify selects given the verdict
// on each candidate's signature, what it says of the better tags it skipped, and when it keeps
// latestRef. Which signatures verify is internal/signature's part, tested there.
func TestSelectVerified(t *testing.T) {
	semver := func(r string) v1.ImagePolicySpec {
		return v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: r}},
			Verify: &v1.OCIRepositoryVerification{Provider: "cosign"}}
	}
	var eleven []string
	elevenVerdicts := map[string]string{}
	for i := 0; i <= 10; i++ {
		tag := fmt.Sprintf("1.%d.0", i)
		eleven = append(eleven, tag)
		elevenVerdicts[tag] = "no signature verifies with the trusted keys"
	}
	elevenVerdicts["1.0.0"] = ""
	for _, tc := range []struct {
		name      string
		c         verifiedCase
		result    string
		tag       string // "" means latestRef is kept
		checked   int
		ready     string // part of Ready's message
		evaluated string // TagsEvaluated's reason after a success
	}{
		{name: "the best verifies",
			c:      verifiedCase{tags: []string{"1.0.0", "1.1.0"}, verdicts: map[string]string{"1.1.0": ""}, spec: semver("*")},
			result: PolicySucceeded, tag: "1.1.0", checked: 1,
			ready: "Latest image tag for 'ghcr.io/org/app' updated from 0.0.1 to 1.1.0", evaluated: v1.EvaluatedReason},
		{name: "better tags that do not verify are skipped and named",
			c: verifiedCase{tags: []string{"1.0.0", "1.1.0", "1.3.0", "1.4.0", "1.5.0"}, spec: semver("*"),
				verdicts: map[string]string{"1.5.0": "tampered", "1.4.0": "signed for another image",
					"1.3.0": "no signature verifies with the trusted keys", "1.1.0": ""}},
			result: PolicySucceeded, tag: "1.1.0", checked: 4,
			ready:     "updated from 0.0.1 to 1.1.0; " + skippedNote + "1.5.0 (tampered), 1.4.0 (signed for another image), 1.3.0 (no signature verifies with the trusted keys)",
			evaluated: v1.SkippedUnverifiedReason},
		{name: "an unsigned better tag is skipped",
			c: verifiedCase{tags: []string{"1.0.0", "2.0.0"}, spec: semver("*"),
				verdicts: map[string]string{"2.0.0": "not signed", "1.0.0": ""}},
			result: PolicySucceeded, tag: "1.0.0", checked: 2, ready: skippedNote + "2.0.0 (not signed)",
			evaluated: v1.SkippedUnverifiedReason},
		{name: "the range applies before the signatures",
			c: verifiedCase{tags: []string{"1.0.0", "1.1.0", "2.0.0"}, spec: semver("1.x"),
				verdicts: map[string]string{"1.1.0": ""}},
			result: PolicySucceeded, tag: "1.1.0", checked: 1, evaluated: v1.EvaluatedReason},
		{name: "none verifies: latestRef is kept",
			c: verifiedCase{tags: []string{"1.0.0", "1.1.0"}, spec: semver("*"),
				verdicts: map[string]string{"1.1.0": "not signed", "1.0.0": "no signature verifies with the trusted keys"}},
			result: PolicyFailed, checked: 2,
			ready: "no signature verifies for any of the 2 best tags, so latestRef is kept: 1.1.0 (not signed), 1.0.0 (no signature verifies with the trusted keys)"},
		{name: "at most ten are checked",
			c:      verifiedCase{tags: eleven, spec: semver("*"), verdicts: elevenVerdicts},
			result: PolicyFailed, checked: MaxVerifiedCandidates, ready: "no signature verifies for any of the 10 best tags"},
		{name: "no candidate",
			c:      verifiedCase{tags: []string{"1.0.0"}, spec: semver(">=2.0.0")},
			result: PolicyFailed, ready: "no candidate tags"},
		{name: "filterTags applies before the signatures",
			c: verifiedCase{tags: []string{"main-1", "main-2", "dev-9"}, verdicts: map[string]string{"main-2": "not signed", "main-1": ""},
				spec: v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: v1.OrderAsc}},
					FilterTags: &v1.TagFilter{Pattern: `^main-(?P<n>\d+)$`, Extract: "$n"},
					Verify:     &v1.OCIRepositoryVerification{Provider: "cosign"}}},
			result: PolicySucceeded, tag: "main-1", checked: 2, ready: skippedNote + "main-2 (not signed)",
			evaluated: v1.SkippedUnverifiedReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checked, result, p := verifiedStatus(t, tc.c)
			if result != tc.result || checked != tc.checked {
				t.Errorf("result %q after %d checked, want %q after %d", result, checked, tc.result, tc.checked)
			}
			ready := condition(p, v1.ReadyCondition)
			if ready == nil || !strings.Contains(ready.Message, tc.ready) {
				t.Fatalf("Ready = %+v, want a message containing %q", ready, tc.ready)
			}
			if tc.tag == "" {
				if p.Status.LatestRef.Tag != "0.0.1" || ready.Status != metav1.ConditionFalse {
					t.Errorf("latestRef %s, Ready %s; want 0.0.1 kept, Ready False", p.Status.LatestRef, ready.Status)
				}
				return
			}
			if p.Status.LatestRef.Tag != tc.tag || ready.Status != metav1.ConditionTrue {
				t.Errorf("latestRef %s, Ready %s; want %s, Ready True", p.Status.LatestRef, ready.Status, tc.tag)
			}
			if ev := condition(p, v1.TagsEvaluatedCondition); ev == nil || ev.Reason != tc.evaluated {
				t.Errorf("TagsEvaluated = %+v, want reason %s", ev, tc.evaluated)
			}
			if got := skippedUnverified(p.Status.Conditions); got != (tc.evaluated == v1.SkippedUnverifiedReason) {
				t.Errorf("skippedUnverified = %v", got)
			}
		})
	}
}
