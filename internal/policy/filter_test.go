package policy

import (
	"errors"
	"regexp"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

func TestFilterTags(t *testing.T) {
	builds := []string{"main-a1b2c3d-1700000300", "main-ffee001-1700000200", "feature-0000000-1800000000", "latest", "v1.4.0"}
	tests := []struct {
		name string
		spec v1.ImagePolicySpec
		tags []string
		want string
	}{
		{"tags the pattern does not match are dropped",
			withFilter(alphabeticalSpec(""), `^main-`, ""), builds, "main-ffee001-1700000200"},
		{"the pattern is not anchored",
			withFilter(semverSpec(">=1.0.0-0"), `rc`, ""), []string{"1.0.0-rc.1", "2.0.0", "0.1.0-rc.2"}, "1.0.0-rc.1"},
		{"an empty pattern keeps every tag",
			withFilter(alphabeticalSpec(""), "", ""), []string{"a", "c", "b"}, "c"},
		{"a named group, as in Flux's documentation",
			withFilter(numericalSpec(v1.OrderAsc), `^main-[a-f0-9]+-(?P<ts>[0-9]+)`, "$ts"), builds, "main-a1b2c3d-1700000300"},
		{"the extracted value is compared, the original tag reported",
			withFilter(alphabeticalSpec(v1.OrderAsc), `^[a-z]+-(.*)$`, "${1}"), []string{"a-2", "b-1"}, "a-2"},
		{"extract with literal text",
			withFilter(semverSpec("^1.0.0"), `^release-(\d+)\.(\d+)$`, "${1}.${2}.0"), []string{"release-1.10", "release-1.9", "release-2.0"}, "release-1.10"},
		{"$1x names a group 1x, as in regexp.Expand, so the value is empty",
			withFilter(alphabeticalSpec(v1.OrderAsc), `^(\w)-(\w)$`, "$1x"), []string{"a-z", "b-y"}, "b-y"},
		{"the first participating group of a repeated name",
			withFilter(alphabeticalSpec(v1.OrderAsc), `^(?:x(?P<n>\d)|y(?P<n>\d))$`, "$n"), []string{"x1", "y3", "x2"}, "y3"},
		{"a template without a reference is a constant value: every candidate ties",
			withFilter(alphabeticalSpec(v1.OrderDesc), `^\d`, "same"), []string{"1", "3", "2", "a"}, "3"},
		{"tie: equal extracted values, the greater tag wins",
			withFilter(alphabeticalSpec(v1.OrderAsc), `^(\w+)-`, "$1"), []string{"b-2", "b-10", "a-9"}, "b-2"},
		{"tie: also in desc",
			withFilter(alphabeticalSpec(v1.OrderDesc), `^(\w+)-`, "$1"), []string{"a-1", "a-2", "b-0"}, "a-2"},
		{"tie: extracted versions with and without v",
			withFilter(semverSpec("*"), `^app-(.*)$`, "$1"), []string{"app-1.0.0", "app-v1.0.0"}, "app-v1.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := latest(t, tt.spec, tt.tags)
			if err != nil || got != tt.want {
				t.Fatalf("Latest() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFilterTagsDropsEverything(t *testing.T) {
	_, err := latest(t, withFilter(alphabeticalSpec(""), `^release-`, ""), []string{"main-1", "latest"})
	if !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("Latest() error = %v, want ErrNoCandidates", err)
	}
}

// TestExtractMatchesExpand holds the shortcut for one-reference templates to what
// regexp.ExpandString produces.
func TestExtractMatchesExpand(t *testing.T) {
	pattern := `^(?P<a>x)?(?P<b>\d+)-(?P<a>\w+)?(é)?(\d)?`
	templates := []string{
		"$0", "$1", "$2", "${2}", "$3", "$5", "$6", "$01", "${01}", "$a", "${a}", "$b", "${b}", "$ß", "${ß}",
		"$c", "$", "$$", "${", "${}", "${a", "$a}", "$1x", "${1}x", "x$1", "$1$2", "$999999999", "$100000000",
		"$b.0", "v$b", "plain", "", "$_", "${a}}", "$\xff",
	}
	tags := []string{"x12-abc", "7-", "12-q", "x3-é", "4-é5", "nope"}
	re := regexp.MustCompile(pattern)
	for _, tmpl := range templates {
		f, err := newTagFilter(v1.TagFilter{Pattern: pattern, Extract: tmpl})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, value := range f.candidates(tags, new(int), new(int)) {
			got = append(got, value)
		}
		var want []string
		for _, tag := range tags {
			if m := re.FindStringSubmatchIndex(tag); m != nil {
				value := tag
				if tmpl != "" {
					value = string(re.ExpandString(nil, tmpl, tag, m))
				}
				want = append(want, value)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("template %q: values %q, want %q", tmpl, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("template %q: values %q, want %q", tmpl, got, want)
				break
			}
		}
	}
}
