package reconcile

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/store"
)

// advanceSpecs are policies of every kind the property below covers: semver ranges with and
// without prereleases, alphabetical and numerical in both orders, filterTags with and without
// extract, and extracts under which many tags rank equal.
var advanceSpecs = []v1.ImagePolicySpec{
	{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: ">=1.0.0"}}},
	{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "1.x"}}},
	{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "~1.2"}}},
	{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: ">=1.0.0-0"}}},
	{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "<2.0.0-rc.5"}}},
	{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "*"}},
		FilterTags: &v1.TagFilter{Pattern: `^v(?P<v>.*)$`, Extract: "$v"}},
	{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{}}},
	{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{Order: v1.OrderDesc}}},
	{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{}},
		FilterTags: &v1.TagFilter{Pattern: `^main-`}},
	{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{}},
		FilterTags: &v1.TagFilter{Pattern: `^(main|v)`, Extract: "same"}},
	{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{}},
		FilterTags: &v1.TagFilter{Pattern: `^main-[a-f0-9]+-(?P<ts>[0-9]+)$`, Extract: "$ts"}},
	{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: v1.OrderDesc}},
		FilterTags: &v1.TagFilter{Pattern: `^main-[a-f0-9]+-(?P<ts>[0-9]+)$`, Extract: "$ts"}},
	{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{}}},
	{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: v1.OrderDesc}},
		FilterTags: &v1.TagFilter{Pattern: `^[0-9]`}},
}

// advanceExclusions stand for an ImageRepository's exclusion list, which a scan applies before
// it stores or announces a tag.
var advanceExclusions = [][]string{nil, {`^.*\.sig$`}, {`^v1\.`, `rc`}}

// randomTag returns a tag in one of the shapes real repositories hold, from small pools so that
// equal-ranking tags and repeats are common.
func randomTag(r *rand.Rand) string {
	n := func(k int) int { return r.IntN(k) }
	switch n(7) {
	case 0:
		return fmt.Sprintf("%d.%d.%d", n(3), n(4), n(4))
	case 1:
		return fmt.Sprintf("v%d.%d.%d", n(3), n(4), n(4))
	case 2:
		return fmt.Sprintf("%d.%d.%d-%s.%d", n(3), n(4), n(3), []string{"rc", "alpha", "beta"}[n(3)], n(3))
	case 3:
		return fmt.Sprintf("%d.%d.%d+b%d", n(3), n(3), n(3), n(3))
	case 4:
		return fmt.Sprintf("main-%x-%d", n(4), n(40))
	case 5:
		return fmt.Sprintf("%d", n(50))
	default:
		return []string{"latest", "sha256-abc.sig", "1.5", "01", "1e3", "-1", "NaN"}[n(7)]
	}
}

// storedAfter is what a scan stores: the tags of the grammar that an exclusion list keeps,
// sorted and unique.
func storedAfter(tags []string, exclude []*regexp.Regexp) []string {
	out := slices.DeleteFunc(slices.Clone(tags), func(t string) bool {
		return !imagename.ValidTag(t) || slices.ContainsFunc(exclude, func(re *regexp.Regexp) bool { return re.MatchString(t) })
	})
	slices.Sort(out)
	return slices.Compact(out)
}

// advanceSelectors are the Selectors of advanceSpecs, and advanceExcluders the compiled
// advanceExclusions.
var advanceSelectors, advanceExcluders = func() ([]*policy.Selector, [][]*regexp.Regexp) {
	var sels []*policy.Selector
	for _, spec := range advanceSpecs {
		sel, err := policy.NewSelector(spec)
		if err != nil {
			panic(err)
		}
		sels = append(sels, sel)
	}
	var excl [][]*regexp.Regexp
	for _, list := range advanceExclusions {
		var res []*regexp.Regexp
		for _, e := range list {
			res = append(res, regexp.MustCompile(e))
		}
		excl = append(excl, res)
	}
	return sels, excl
}()

// advanceCase picks a spec and an exclusion list by their indexes in advanceSpecs and
// advanceExclusions, a reflection policy, and whether the policy has spec.verify; the verdict
// on a digest is then drawn from seed.
type advanceCase struct {
	spec      int
	reflect   v1.ReflectionPolicy
	exclusion int
	verify    bool
	seed      uint8
}

// advanceImage is the image of the repository of checkAdvance.
const advanceImage = "example.test/app"

// checkAdvance checks that the two tag views decide alike, under the spec and exclusion list of
// c: for one stored list and one addition, the decision over the policy's latestRef and the
// push's delta is the decision over the whole list after the addition, digest included, or
// else asks for that list. digests stand for the registry. answered tells that the delta view
// answered.
func checkAdvance(t *testing.T, c advanceCase, stored, pushed []string, digests map[string]string) (answered bool) {
	t.Helper()
	i, j := c.spec, c.exclusion
	spec, sel := advanceSpecs[i], advanceSelectors[i]
	spec.DigestReflectionPolicy = c.reflect
	exclusions, exclude := advanceExclusions[j], advanceExcluders[j]
	reg := &registryAnswers{t: t, digests: digests, verdicts: map[string]string{}}
	verifier := ""
	if c.verify {
		verifier = "trusted-keys"
		for _, digest := range digests {
			// About one digest in three carries no valid signature.
			if (digest[len(digest)-1]+c.seed)%3 == 0 {
				reg.verdicts[digest] = "not signed"
			} else {
				reg.verdicts[digest] = ""
			}
		}
	}
	repo := &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", UID: "repo-uid"},
		Spec: v1.ImageRepositorySpec{Image: advanceImage}}
	pol := &v1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Generation: 1}, Spec: spec}
	full := func(pol *v1.ImagePolicy, tags []string, revision string) decision {
		return reg.settle(decisionInput{pol: pol, repo: repo, sel: sel, verifier: verifier,
			view: storedView(&store.Entry{Tags: tags, Revision: revision}), known: newKnowledge()})
	}
	before := storedAfter(stored, exclude)
	first := full(pol, before, "sha256:before")
	if first.kind != decideSucceed {
		// No successful evaluation of this list: there is nothing to advance from.
		return false
	}
	_, evaluated := applied(first)
	// The addition, as the scan makes it: what the exclusion list keeps and the list lacks.
	d := &delta{id: store.Identity{UID: "repo-uid", Image: advanceImage}, from: "sha256:before", to: "sha256:after",
		digests: map[string]string{}}
	for _, tag := range storedAfter(pushed, exclude) {
		if _, found := slices.BinarySearch(before, tag); !found {
			d.tags, d.digests[tag] = append(d.tags, tag), digests[tag]
		}
	}
	after := storedAfter(append(slices.Clone(before), d.tags...), exclude)
	want := full(evaluated, after, d.to)
	// What this process remembers of the first evaluation: the digest of the tag it selected,
	// whose signature verified.
	known := newKnowledge()
	if c.verify {
		known.learnDigest(first.latest.Tag, first.digest)
		known.learnVerdict(first.digest, verdict{ok: true})
	}
	got := reg.settle(decisionInput{pol: evaluated, repo: repo, sel: sel, verifier: verifier, view: deltaView(d), known: known})
	what := fmt.Sprintf("spec %+v %+v, reflect %s, verify %v, exclude %q, stored %q, added %q", spec.Policy, spec.FilterTags,
		c.reflect, c.verify, exclusions, before, d.tags)
	switch {
	case got.kind == decideNeeds && got.need.kind == lookupStoredList:
		// Without spec.verify, only a digest due again under Always, or a list the rule fails on,
		// may send the decision to the stored list.
		if !c.verify && want.kind == decideSucceed && (c.reflect != v1.ReflectAlways || want.latest.Tag != first.latest.Tag) {
			t.Fatalf("%s: the delta view asks for the stored list, which selects %+v", what, *want.latest)
		}
	case got.kind != decideSucceed:
		t.Fatalf("%s: the delta view decided %d (%+v); want an answer or the stored list", what, got.kind, got.need)
	case want.kind != decideSucceed:
		t.Fatalf("%s: the delta view selects %+v, but the stored list fails: %v", what, *got.latest, want.fail.cause)
	case *got.latest != *want.latest || !slices.Equal(got.skipped, want.skipped) || got.inputs != want.inputs:
		t.Fatalf("%s: the delta view selects %+v skipping %v, the stored list %+v skipping %v", what,
			*got.latest, got.skipped, *want.latest, want.skipped)
	}
	return got.kind == decideSucceed
}

// TestAdvanceIsAFullEvaluation: for random stored lists and random additions, the decision over a
// policy's latestRef and the added tags is the decision over the whole list after the addition,
// digest and skipped tags included, for every kind of policy, with and without spec.verify.
func TestAdvanceIsAFullEvaluation(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	reflects := []v1.ReflectionPolicy{v1.ReflectNever, v1.ReflectIfNotPresent, v1.ReflectAlways}
	rounds := 600
	if testing.Short() {
		rounds = 100
	}
	// How often the delta view answered, with and without spec.verify: the property holds of
	// answers, not only of deferrals to the stored list.
	answered := map[bool]int{}
	for range rounds {
		digests := map[string]string{}
		tags := func(k int) []string {
			var out []string
			for range k {
				tag := randomTag(r)
				out = append(out, tag)
				digests[tag] = fmt.Sprintf("sha256:%064x", len(digests)+1)
			}
			return out
		}
		stored, pushed := tags(r.IntN(30)), tags(1+r.IntN(16))
		for i := range advanceSpecs {
			for _, reflect := range reflects {
				for _, verify := range []bool{false, true} {
					if checkAdvance(t, advanceCase{spec: i, reflect: reflect, exclusion: r.IntN(len(advanceExclusions)),
						verify: verify, seed: uint8(r.IntN(3))}, stored, pushed, digests) {
						answered[verify]++
					}
				}
			}
		}
	}
	t.Logf("the delta view answered %d times without spec.verify, %d with", answered[false], answered[true])
	if answered[false] < rounds || answered[true] < rounds/4 {
		t.Errorf("the delta view answered %d times without spec.verify, %d with, in %d rounds", answered[false], answered[true], rounds)
	}
}

// A latestRef outside the grammar, which a version before the grammar was enforced may have
// selected, is no base to advance from: the full evaluation that replaces it reads the store,
// which no longer returns it.
func TestAdvanceNeverKeepsATagOutsideTheGrammar(t *testing.T) {
	sel, err := policy.NewSelector(v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{Order: "asc"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"zz\x1b[31m", "zz\u202e", "1.0.0+build.1", ""} {
		latest := v1.ImageRef{Name: "example.test/app", Tag: tag}
		if got, ok := Advance(sel, v1.ReflectNever, latest, []string{"a1"}, nil); ok {
			t.Errorf("Advance from latest tag %q = %+v, want a full evaluation", tag, got)
		}
	}
}

// FuzzAdvance is the property of TestAdvanceIsAFullEvaluation over lists the fuzzer makes:
// newline-separated stored tags, then "|", then the added ones.
func FuzzAdvance(f *testing.F) {
	f.Add("1.0.0\n1.2.0\nv1.3.0|1.2.1\n2.0.0-rc.1", uint8(0))
	f.Add("main-a-10\nmain-b-9|main-c-10", uint8(10))
	f.Add("1\n2\n3|x", uint8(12))
	f.Add("a\nb|b\nc", uint8(7))
	f.Fuzz(func(t *testing.T, lists string, pick uint8) {
		storedText, pushedText, _ := strings.Cut(lists, "|")
		stored, pushed := strings.Split(storedText, "\n"), strings.Split(pushedText, "\n")
		if len(stored) > 200 || len(pushed) > 16 {
			return
		}
		digests := map[string]string{}
		for i, tag := range append(slices.Clone(stored), pushed...) {
			digests[tag] = fmt.Sprintf("sha256:%064x", i+1)
		}
		reflect := []v1.ReflectionPolicy{v1.ReflectNever, v1.ReflectIfNotPresent, v1.ReflectAlways}[int(pick)/len(advanceSpecs)%3]
		for _, verify := range []bool{false, true} {
			checkAdvance(t, advanceCase{spec: int(pick) % len(advanceSpecs), reflect: reflect,
				exclusion: int(pick) % len(advanceExclusions), verify: verify, seed: pick}, stored, pushed, digests)
		}
	})
}
