package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestSemver(t *testing.T) {
	long := "1.0.0-" + strings.Repeat("a", 250) // 256 bytes, the longest version Flux parses
	tests := []struct {
		name string
		rng  string
		tags []string
		want string // "" when no tag qualifies
	}{
		{"the highest version wins, not the greatest string", ">=1.0.0",
			[]string{"1.0.0", "1.9.9", "1.10.0", "1.2.0"}, "1.10.0"},
		{"versions outside the range are skipped", "^1.0.0",
			[]string{"0.9.0", "1.5.0", "2.0.0", "10.0.0"}, "1.5.0"},
		{"one leading v is removed, the original tag is reported", ">=1.0.0",
			[]string{"v1.2.0", "1.1.0"}, "v1.2.0"},
		{"an upper-case V is not removed", "*",
			[]string{"V2.0.0", "1.0.0"}, "1.0.0"},
		{"only one v is removed", "*",
			[]string{"vv2.0.0", "1.0.0"}, "1.0.0"},
		{"tags that are not strict versions are skipped", "*",
			[]string{"1.0", "1", "1.0.0.1", "01.0.0", "1.01.0", "1.0.01", "latest", "1.0.0-", "1.0.0+",
				"1.0.0-01", "1.0.0-a..b", "1.0.0+a..b", "1.0.0-a_b", " 1.0.0", "1.0.0 ", "1.0.0-rc+b+c",
				"-1.0.0", "+1.0.0", "1.0.0.", "1..0", "", "v", "18446744073709551616.0.0", "0.1.0"}, "0.1.0"},
		{"the largest numbers that fit are versions", "*",
			[]string{"18446744073709551615.0.0", "1.0.0"}, "18446744073709551615.0.0"},
		{"a tag of 256 bytes is a version", ">=0.0.0-0",
			[]string{long, "0.1.0"}, long},
		{"a longer tag is not, even with its v removed", ">=0.0.0-0",
			[]string{"v" + long, "0.1.0"}, "0.1.0"},
		{"a prerelease is skipped when the range names none", ">=1.0.0",
			[]string{"1.0.0", "1.1.0-rc.1"}, "1.0.0"},
		{"a prerelease qualifies when the range names one", ">=1.0.0-0",
			[]string{"1.0.0", "1.1.0-rc.1"}, "1.1.0-rc.1"},
		{"a release is above its prereleases", ">=1.0.0-0",
			[]string{"1.0.0-rc.1", "1.0.0", "1.0.0-rc.2"}, "1.0.0"},
		{"prerelease identifiers compare numerically when both are numbers", ">=1.0.0-0",
			[]string{"1.0.0-rc.2", "1.0.0-rc.10", "1.0.0-rc.9"}, "1.0.0-rc.10"},
		{"a numeric identifier is below a word", ">=1.0.0-0",
			[]string{"1.0.0-alpha", "1.0.0-1"}, "1.0.0-alpha"},
		{"words compare byte-wise", ">=1.0.0-0",
			[]string{"1.0.0-beta", "1.0.0-alpha", "1.0.0-Beta"}, "1.0.0-beta"},
		{"a longer prerelease is above its prefix", ">=1.0.0-0",
			[]string{"1.0.0-alpha", "1.0.0-alpha.1"}, "1.0.0-alpha.1"},
		{"digits too big for a number compare as a word", ">=1.0.0-0",
			[]string{"1.0.0-99999999999999999999", "1.0.0-alpha"}, "1.0.0-alpha"},
		{"tie: with and without v, the greater tag wins", "*",
			[]string{"1.0.0", "v1.0.0"}, "v1.0.0"},
		{"tie: in any order", "*",
			[]string{"v1.0.0", "1.0.0"}, "v1.0.0"},
		{"tie: build metadata is ignored, the greater tag wins", "*",
			[]string{"1.0.0+b2", "1.0.0", "1.0.0+b10"}, "1.0.0+b2"},
		{"versions above every number of the range are admitted when the range allows", "!=5.0.0",
			[]string{"6.0.0", "7.1.0", "5.0.0"}, "7.1.0"},
		{"and rejected when it does not", "~1.2",
			[]string{"1.2.9", "1.3.0", "1.30.0", "30.0.0"}, "1.2.9"},
		{"either side of an or", "<1.5.0 || >=3.0.0",
			[]string{"2.0.0", "1.4.0", "9.0.0"}, "9.0.0"},
		{"a prerelease only where its group names one", "1.2.3-rc.1 || >=2.0.0",
			[]string{"1.2.3-rc.1", "9.0.0-rc.1"}, "1.2.3-rc.1"},
		{"a hyphen range", "1.0.0 - 2.0.0",
			[]string{"2.0.0", "2.0.1", "0.9.0"}, "2.0.0"},
		{"no version in range", "^3.0.0",
			[]string{"1.0.0", "latest", "4.0.0"}, ""},
		{"no version at all", "*",
			[]string{"latest", "main"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSelector(semverSpec(tt.rng))
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Latest(tt.tags)
			if tt.want == "" {
				if !errors.Is(err, ErrNoCandidates) {
					t.Fatalf("Latest() = %q, %v; want ErrNoCandidates", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Latest() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestSemverInvalidRange(t *testing.T) {
	for _, rng := range []string{"latest", ">=1.0.0 <", "1.0.0 ||| 2", "=>>1", strings.Repeat("1 || ", 40) + "1"} {
		_, err := NewSelector(semverSpec(rng))
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "semver range") {
			t.Errorf("range %q: NewSelector() error = %v, want an invalid semver range", rng, err)
		}
	}
}
