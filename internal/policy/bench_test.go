package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// benchKinds are the policies BenchmarkLatest measures, each on the tag mix it is used with.
var benchKinds = []struct {
	name string
	spec v1.ImagePolicySpec
	tags func(n int, rnd *rand.Rand) []string
}{
	{"semver", semverSpec(">=1.0.0 <3.0.0"), semverMix},
	{"semver-prerelease", semverSpec(">=1.0.0-0"), semverMix},
	{"alphabetical", alphabeticalSpec(v1.OrderAsc), calverMix},
	{"numerical", numericalSpec(v1.OrderAsc), buildNumberMix},
	{"filter-extract", withFilter(numericalSpec(v1.OrderAsc), `^main-[a-f0-9]+-(?P<ts>[0-9]+)`, "$ts"), branchBuildMix},
}

// BenchmarkLatest measures one evaluation over 1k, 10k and 100k tags listed in byte order,
// as registries list them, and laid out in memory in that order, as decoding the stored
// JSON list leaves them. (Sorted in place instead, the strings sit scattered across the heap
// and a 100k evaluation takes about twice as long, waiting on memory.)
func BenchmarkLatest(b *testing.B) {
	for _, kind := range benchKinds {
		for _, n := range []int{1_000, 10_000, 100_000} {
			tags := kind.tags(n, rand.New(rand.NewPCG(1, uint64(n))))
			slices.Sort(tags)
			for i := range tags {
				tags[i] = strings.Clone(tags[i])
			}
			s, err := NewSelector(kind.spec)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%dk", kind.name, n/1000), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Latest(tags); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkFluxSemver100k is the baseline of the semver figures in docs/benchmarks.md: Flux's
// method over the same 100k tags, which parses every tag into a Masterminds version (a strict
// parse without a leading "v" first, then a lenient one of the whole tag), keeps those the range
// accepts and sorts them all to take the greatest.
func BenchmarkFluxSemver100k(b *testing.B) {
	tags := semverMix(100_000, rand.New(rand.NewPCG(1, 100_000)))
	slices.Sort(tags)
	c, err := semver.NewConstraint(">=1.0.0 <3.0.0")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var versions []*semver.Version
		for _, tag := range tags {
			v, err := semver.StrictNewVersion(strings.TrimPrefix(tag, "v"))
			if err != nil {
				v, err = semver.NewVersion(tag)
			}
			if err == nil && c.Check(v) {
				versions = append(versions, v)
			}
		}
		sort.Sort(sort.Reverse(semver.Collection(versions)))
		if len(versions) == 0 {
			b.Fatal("no version in range")
		}
	}
}

// semverMix is 70% versions (majors 0-5, half with a "v", a quarter prereleases, some with
// build metadata) and 30% other tags: moving tags, commit tags, two-part versions, dates.
func semverMix(n int, rnd *rand.Rand) []string {
	tags := make([]string, n)
	for i := range tags {
		if rnd.IntN(10) < 3 {
			tags[i] = junkTag(rnd)
			continue
		}
		t := fmt.Sprintf("%d.%d.%d", rnd.IntN(6), rnd.IntN(40), rnd.IntN(40))
		switch rnd.IntN(8) {
		case 0:
			t += fmt.Sprintf("-rc.%d", rnd.IntN(5))
		case 1:
			t += fmt.Sprintf("-alpha.%d", rnd.IntN(5))
		case 2:
			t += fmt.Sprintf("+build.%d", rnd.IntN(1000))
		}
		if rnd.IntN(2) == 0 {
			t = "v" + t
		}
		tags[i] = t
	}
	return tags
}

func junkTag(rnd *rand.Rand) string {
	switch rnd.IntN(6) {
	case 0:
		return []string{"latest", "main", "stable", "edge"}[rnd.IntN(4)]
	case 1:
		return fmt.Sprintf("sha-%07x", rnd.Uint32()>>4)
	case 2:
		return fmt.Sprintf("%d.%d", rnd.IntN(6), rnd.IntN(40))
	case 3:
		return fmt.Sprintf("pr-%d", rnd.IntN(5000))
	case 4:
		return fmt.Sprintf("%d.%02d.%02d", 2020+rnd.IntN(6), 1+rnd.IntN(12), 1+rnd.IntN(28))
	default:
		return fmt.Sprintf("%d.%d.%d-%07x", rnd.IntN(6), rnd.IntN(40), rnd.IntN(40), rnd.Uint32()>>4)
	}
}

// calverMix is MinIO-style release tags, the kind the alphabetical policy is used for.
func calverMix(n int, rnd *rand.Rand) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("RELEASE.%d-%02d-%02dT%02d-%02d-%02dZ", 2018+rnd.IntN(8), 1+rnd.IntN(12),
			1+rnd.IntN(28), rnd.IntN(24), rnd.IntN(60), rnd.IntN(60))
	}
	return tags
}

// buildNumberMix is CI build numbers.
func buildNumberMix(n int, rnd *rand.Rand) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprint(1 + rnd.IntN(10*n))
	}
	return tags
}

// branchBuildMix is 80% "main-<sha>-<timestamp>" tags, the filterTags example of Flux's
// documentation, and 20% tags of other branches and releases.
func branchBuildMix(n int, rnd *rand.Rand) []string {
	tags := make([]string, n)
	for i := range tags {
		ts := 1_600_000_000 + rnd.IntN(200_000_000)
		switch rnd.IntN(10) {
		case 0:
			tags[i] = fmt.Sprintf("feature-%07x-%d", rnd.Uint32()>>4, ts)
		case 1:
			tags[i] = fmt.Sprintf("v%d.%d.%d", rnd.IntN(6), rnd.IntN(40), rnd.IntN(40))
		default:
			tags[i] = fmt.Sprintf("main-%07x-%d", rnd.Uint32()>>4, ts)
		}
	}
	return tags
}

func semverSpec(rng string) v1.ImagePolicySpec {
	return v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: rng}}}
}

func alphabeticalSpec(order string) v1.ImagePolicySpec {
	return v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{Order: order}}}
}

func numericalSpec(order string) v1.ImagePolicySpec {
	return v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: order}}}
}

func withFilter(spec v1.ImagePolicySpec, pattern, extract string) v1.ImagePolicySpec {
	spec.FilterTags = &v1.TagFilter{Pattern: pattern, Extract: extract}
	return spec
}
