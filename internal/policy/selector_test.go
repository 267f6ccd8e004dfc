package policy

import (
	"errors"
	"strings"
	"sync"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// latest evaluates a spec that must be valid.
func latest(t *testing.T, spec v1.ImagePolicySpec, tags []string) (string, error) {
	t.Helper()
	s, err := NewSelector(spec)
	if err != nil {
		t.Fatalf("NewSelector() error = %v", err)
	}
	return s.Latest(tags)
}

func TestNewSelectorInvalidPolicy(t *testing.T) {
	tests := []struct {
		name    string
		spec    v1.ImagePolicySpec
		mention string
	}{
		{"no policy", v1.ImagePolicySpec{}, "no policy set"},
		{"two policies", v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{
			SemVer: &v1.SemVerPolicy{Range: "*"}, Numerical: &v1.NumericalPolicy{}}}, "semver, numerical"},
		{"three policies", v1.ImagePolicySpec{Policy: v1.ImagePolicyChoice{
			SemVer: &v1.SemVerPolicy{Range: "*"}, Alphabetical: &v1.AlphabeticalPolicy{}, Numerical: &v1.NumericalPolicy{}}},
			"more than one policy"},
		{"invalid semver range", semverSpec("not-a-range"), `semver range "not-a-range"`},
		{"invalid alphabetical order", alphabeticalSpec("up"), `alphabetical order "up": must be one of asc, desc`},
		{"invalid numerical order", numericalSpec("ascending"), `numerical order "ascending": must be one of asc, desc`},
		{"invalid pattern", withFilter(alphabeticalSpec(""), `^(main`, ""), `filterTags pattern "^(main"`},
		{"Perl syntax RE2 lacks", withFilter(alphabeticalSpec(""), `(?=x)`, "$1"), "filterTags pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSelector(tt.spec)
			if !errors.Is(err, ErrInvalidPolicy) || s != nil {
				t.Fatalf("NewSelector() = %v, %v; want ErrInvalidPolicy", s, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestLatestNoCandidates(t *testing.T) {
	tests := []struct {
		name    string
		spec    v1.ImagePolicySpec
		tags    []string
		mention string
	}{
		{"no tags", alphabeticalSpec(""), nil, "no tags"},
		{"no tags, semver", semverSpec("*"), []string{}, "no tags"},
		{"filterTags matches none", withFilter(numericalSpec(""), `^\d+$`, ""), []string{"latest"},
			`none of the 1 tags matches filterTags pattern "^\\d+$"`},
		{"no version in range", semverSpec("^2"), []string{"1.0.0", "3.0.0"}, `none of the 2 tags is a version in range "^2"`},
		{"no version in range among the filtered", withFilter(semverSpec("^2"), `^\d`, ""), []string{"1.0.0", "v2.0.0"},
			`none of the 1 tags that match filterTags is a version in range "^2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := latest(t, tt.spec, tt.tags)
			if !errors.Is(err, ErrNoCandidates) || errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("Latest() = %q, %v; want ErrNoCandidates", got, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}

func TestSelectorIgnoresUnrelatedSpecFields(t *testing.T) {
	spec := alphabeticalSpec("")
	spec.FilterTags = &v1.TagFilter{}
	spec.Suspend = true
	spec.DigestReflectionPolicy = v1.ReflectAlways
	if got, err := latest(t, spec, []string{"a", "b"}); err != nil || got != "b" {
		t.Fatalf("Latest() = %q, %v; want %q", got, err, "b")
	}
}

func TestSelectorIsSafeForConcurrentUse(t *testing.T) {
	s, err := NewSelector(withFilter(semverSpec("^1.0.0"), `^(?:release-)?(.*)$`, "$1"))
	if err != nil {
		t.Fatal(err)
	}
	tags := []string{"release-1.2.0", "1.3.0", "2.0.0", "latest"}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got, err := s.Latest(tags); err != nil || got != "1.3.0" {
					t.Errorf("Latest() = %q, %v; want %q", got, err, "1.3.0")
					return
				}
			}
		})
	}
	wg.Wait()
}
