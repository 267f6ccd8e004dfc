package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// referrerTag is the reference's reading of IsReferrerTag.
var referrerTag = regexp.MustCompile(`(?s)^sha256-[0-9a-f]{64}(\..*)?$`)

// errNumber marks the reference's numerical parse failures.
var errNumber = errors.New("not a number")

// referenceLatest applies a policy the way Flux's image-reflector-controller does, in the most
// direct way: regexp.ExpandString for every tag, Flux's version parsing (strip a "v", then
// StrictNewVersion, then NewVersion of the whole tag), Masterminds' Check and Compare on
// every version, strings.ToUpper for the order, after dropping referrer tags by a regular
// expression. Only the tie-break is this package's.
// Selector must agree with it on every input.
func referenceLatest(spec v1.ImagePolicySpec, tags []string) (string, error) {
	var re *regexp.Regexp
	extract := ""
	if f := spec.FilterTags; f != nil {
		var err error
		if re, err = regexp.Compile(f.Pattern); err != nil {
			return "", ErrInvalidPolicy
		}
		extract = f.Extract
	}
	p := spec.Policy
	set := 0
	for _, isSet := range []bool{p.SemVer != nil, p.Alphabetical != nil, p.Numerical != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 {
		return "", ErrInvalidPolicy
	}

	// better reports whether a candidate beats the best so far, given how their values
	// compare; equal values go to the greater tag.
	var best string
	found := false
	better := func(c int, tag string) bool { return !found || c > 0 || c == 0 && tag > best }

	var constraints *semver.Constraints
	var bestVersion *semver.Version
	var bestValue string
	var bestNum float64
	desc := false
	switch {
	case p.SemVer != nil:
		var err error
		if constraints, err = semver.NewConstraint(p.SemVer.Range); err != nil {
			return "", ErrInvalidPolicy
		}
	case p.Alphabetical != nil:
		switch strings.ToUpper(p.Alphabetical.Order) {
		case "", "ASC":
		case "DESC":
			desc = true
		default:
			return "", ErrInvalidPolicy
		}
	default:
		switch strings.ToUpper(p.Numerical.Order) {
		case "", "ASC":
		case "DESC":
			desc = true
		default:
			return "", ErrInvalidPolicy
		}
	}

	for _, tag := range tags {
		if referrerTag.MatchString(tag) {
			continue
		}
		value := tag
		if re != nil {
			m := re.FindStringSubmatchIndex(tag)
			if m == nil {
				continue
			}
			if extract != "" {
				value = string(re.ExpandString(nil, extract, tag, m))
			}
		}
		switch {
		case p.SemVer != nil:
			if _, err := semver.StrictNewVersion(strings.TrimPrefix(value, "v")); err != nil {
				continue
			}
			v, err := semver.NewVersion(value)
			if err != nil || !constraints.Check(v) {
				continue
			}
			c := 0
			if found {
				c = v.Compare(bestVersion)
			}
			if better(c, tag) {
				best, bestVersion, found = tag, v, true
			}
		case p.Alphabetical != nil:
			c := strings.Compare(value, bestValue)
			if desc {
				c = -c
			}
			if better(c, tag) {
				best, bestValue, found = tag, value, true
			}
		default:
			num, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return "", fmt.Errorf("%w: %q", errNumber, tag)
			}
			c := cmp.Compare(num, bestNum)
			if desc {
				c = -c
			}
			if better(c, tag) {
				best, bestNum, found = tag, num, true
			}
		}
	}
	if !found {
		return "", ErrNoCandidates
	}
	return best, nil
}

// outcome reduces a Latest result to what the reference can be compared on.
func outcome(tag string, err error) string {
	switch {
	case errors.Is(err, ErrInvalidPolicy):
		return "invalid policy"
	case errors.Is(err, ErrNoCandidates):
		return "no candidates"
	case err != nil:
		return "evaluation error"
	default:
		return "tag " + strconv.Quote(tag)
	}
}

func selectorOutcome(spec v1.ImagePolicySpec, tags []string) string {
	s, err := NewSelector(spec)
	if err != nil {
		return outcome("", err)
	}
	return outcome(s.Latest(tags))
}

func referenceOutcome(spec v1.ImagePolicySpec, tags []string) string {
	tag, err := referenceLatest(spec, tags)
	if errors.Is(err, errNumber) {
		err = errors.New("evaluation error")
	}
	return outcome(tag, err)
}

// TestMatchesReference runs ranges of every shape over dense version mixes, in byte order
// and shuffled, and expects the reference's answer. Small numbers put many versions on each
// side of every bound the ranges name.
func TestMatchesReference(t *testing.T) {
	ranges := []string{
		"*", "", ">=1.0.0", "^2.0.0", "^2", "^0.2.3", "^0.0.3", "^0.0", "^0", "^*", "~1.2", "~1.2.3", "~1",
		"~0", "~0.0.0", "~*", "1.x", "1.2.x", "2.*", "x", "=3.1.4", "3.1.4", "!=3.0.0", "!=1.x", "!=1.2.x",
		"<1.2.5", "<=2.3", "<=2", "<=2.3.4", ">1", ">1.2", ">1.2.3", ">=2.0.0-beta <2.0.0", "1.0.0 - 2.5.0",
		"1.2 - 3", ">1.0.0 <3.0.0 || >=5", "<1.5.0 || >=3.0.0", ">=1.0.0-0", "^1.2.3-rc.1", "~2.3.x-rc",
		"!=1.2.x-alpha", ">= 1.1, < 2", ">=v1.0.0", ">=10.0.0", "<=11", "^11.11.11", "2.3.x-rc || 4.x",
		"1.2.3-rc.1 || >=2.0.0", "~1.2.3-0 || >3", "1.0.0 - 2.0.0-rc || >=4", "^1.0.0-0 || 2.x",
		"~1.2.0-0 !=1.2.x-rc.1", ">=1.2.0-0 <1.3.0 !=1.2.x-alpha", "!=1.2.x-alpha",
	}
	mixes := map[string][]string{
		"dense":              denseVersions(),
		"prereleases on top": {"1.2.13-rc.1", "1.2.12-rc.1", "1.2.12-alpha", "1.2.11", "1.2.13-alpha.1", "0.1.0"},
		"bench":              semverMix(1000, rand.New(rand.NewPCG(7, 7))),
		"sorted":             slices.Sorted(slices.Values(semverMix(1000, rand.New(rand.NewPCG(8, 8))))),
	}
	for _, rng := range ranges {
		for name, tags := range mixes {
			spec := semverSpec(rng)
			if got, want := selectorOutcome(spec, tags), referenceOutcome(spec, tags); got != want {
				t.Errorf("range %q over %s tags: got %s, want %s", rng, name, got, want)
			}
		}
	}
}

// denseVersions is every version with numbers 0-12 in each place, with and without a
// prerelease, and a few prereleases above all of them, in a shuffled order.
func denseVersions() []string {
	var tags []string
	for major := range 13 {
		for minor := range 13 {
			for patch := range 13 {
				v := fmt.Sprintf("%d.%d.%d", major, minor, patch)
				tags = append(tags, v, v+"-rc.1", v+"-alpha", "v"+v+"+build.1")
			}
		}
	}
	tags = append(tags, "13.0.0-rc.1", "v13.1.0-beta", "2.13.0-rc.1", "99.0.0-0")
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
	return tags
}
