package reconcile

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/policy"
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

// fullLatest is what an evaluation from the store selects over tags: the tag and the digest the
// policy reflects, digests standing for the registry.
func fullLatest(sel *policy.Selector, reflect v1.ReflectionPolicy, tags []string, digests map[string]string) (v1.ImageRef, error) {
	tag, err := sel.Latest(tags)
	if err != nil {
		return v1.ImageRef{}, err
	}
	ref := v1.ImageRef{Name: "example.test/app", Tag: tag}
	if reflect != v1.ReflectNever {
		ref.Digest = digests[tag]
	}
	return ref, nil
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
// advanceExclusions, and a reflection policy.
type advanceCase struct {
	spec      int
	reflect   v1.ReflectionPolicy
	exclusion int
}

// checkAdvance checks Advance against a full evaluation for one stored list and one addition,
// under the spec and exclusion list of c.
func checkAdvance(t *testing.T, c advanceCase, stored, pushed []string, digests map[string]string) {
	t.Helper()
	i, reflect, j := c.spec, c.reflect, c.exclusion
	spec, sel := advanceSpecs[i], advanceSelectors[i]
	exclusions, exclude := advanceExclusions[j], advanceExcluders[j]
	before := storedAfter(stored, exclude)
	latest, err := fullLatest(sel, reflect, before, digests)
	if err != nil {
		// No successful evaluation of this list: there is nothing to advance from.
		return
	}
	// The addition, as the scan makes it: what the exclusion list keeps and the list lacks.
	var added []string
	for _, tag := range storedAfter(pushed, exclude) {
		if _, found := slices.BinarySearch(before, tag); !found {
			added = append(added, tag)
		}
	}
	after := storedAfter(append(slices.Clone(before), added...), exclude)
	want, wantErr := fullLatest(sel, reflect, after, digests)
	got, ok := Advance(sel, reflect, latest, added, digests)
	what := fmt.Sprintf("spec %+v %+v, reflect %s, exclude %q, stored %q, added %q", spec.Policy, spec.FilterTags, reflect, exclusions, before, added)
	switch {
	case wantErr != nil:
		if ok {
			t.Fatalf("%s: advanced to %+v, but a full evaluation fails: %v", what, got, wantErr)
		}
	case !ok:
		// Only a digest due again under Always may send an outcome to the store.
		if reflect != v1.ReflectAlways || want.Tag != latest.Tag {
			t.Fatalf("%s: not advanced; a full evaluation selects %+v", what, want)
		}
	case got != want:
		t.Fatalf("%s: advanced to %+v, a full evaluation selects %+v", what, got, want)
	}
}

// TestAdvanceIsAFullEvaluation: for random stored lists and random additions, advancing a
// policy's latest image by the added tags selects what a full evaluation of the whole list
// after the addition selects, digest included, for every kind of policy.
func TestAdvanceIsAFullEvaluation(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	reflects := []v1.ReflectionPolicy{v1.ReflectNever, v1.ReflectIfNotPresent, v1.ReflectAlways}
	rounds := 600
	if testing.Short() {
		rounds = 100
	}
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
				checkAdvance(t, advanceCase{spec: i, reflect: reflect, exclusion: r.IntN(len(advanceExclusions))}, stored, pushed, digests)
			}
		}
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
		checkAdvance(t, advanceCase{spec: int(pick) % len(advanceSpecs), reflect: reflect, exclusion: int(pick) % len(advanceExclusions)}, stored, pushed, digests)
	})
}
