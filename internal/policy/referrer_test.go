package policy

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// hex64 is a digest's hex as the tags of signatures and attestations carry it; the nines make
// it the greatest number and the greatest extracted version wherever a policy reads digits.
const hex64 = "9999999999999999999999999999999999999999999999999999999999999999"

// referrerTags are the tags cosign, Notation's fallback and the OCI 1.1 referrers tag schema
// push beside an image.
var referrerTags = []string{
	"sha256-" + hex64,
	"sha256-" + hex64 + ".sig",
	"sha256-" + hex64 + ".att",
	"sha256-" + hex64 + ".sbom",
	"sha256-" + strings.Repeat("f", 64) + ".sig",
}

func TestIsReferrerTag(t *testing.T) {
	for _, tag := range referrerTags {
		if !IsReferrerTag(tag) {
			t.Errorf("IsReferrerTag(%q) = false", tag)
		}
	}
	for _, tag := range []string{
		"", "sha256", "sha256-", "sha256-" + hex64[:63], "sha256-" + hex64 + "0",
		"sha256-" + strings.Repeat("A", 64), "sha256-" + hex64 + "-amd64", "sha512-" + hex64,
		"v1.2.3", "sha256-" + hex64[:63] + "g.sig", "xsha256-" + hex64,
	} {
		if IsReferrerTag(tag) {
			t.Errorf("IsReferrerTag(%q) = true", tag)
		}
	}
}

func TestReferredDigest(t *testing.T) {
	for _, tag := range referrerTags {
		hex := tag[len("sha256-") : len("sha256-")+64]
		if got, ok := ReferredDigest(tag); !ok || got != "sha256:"+hex {
			t.Errorf("ReferredDigest(%q) = %q, %v; want sha256:%s", tag, got, ok, hex)
		}
	}
	for _, tag := range []string{"v1.2.3", "sha256-" + hex64 + "-amd64", "sha256-" + hex64[:63]} {
		if got, ok := ReferredDigest(tag); ok {
			t.Errorf("ReferredDigest(%q) = %q, true", tag, got)
		}
	}
}

// TestReferrerTagsNeverLatest puts the referrer tags beside images under every policy kind,
// each arranged so that a referrer tag would win if it were a candidate.
func TestReferrerTagsNeverLatest(t *testing.T) {
	tests := []struct {
		name   string
		spec   v1.ImagePolicySpec
		images []string
		want   string
	}{
		// "sha256-..." sorts after "1.x" and "main-...".
		{"alphabetical", alphabeticalSpec(""), []string{"1.0.0", "main-abc"}, "main-abc"},
		{"alphabetical desc", alphabeticalSpec("desc"), []string{"zz", "yy"}, "yy"},
		{"alphabetical with a filter that keeps them", withFilter(alphabeticalSpec(""), `^(main|sha)`, ""),
			[]string{"main-1", "main-2"}, "main-2"},
		// Without the exclusion the referrer tags would fail a numerical policy outright.
		{"numerical", numericalSpec(""), []string{"1", "20"}, "20"},
		{"numerical extract", withFilter(numericalSpec(""), `(?P<n>[0-9]+)`, "$n"), []string{"build-7", "build-12"}, "build-12"},
		{"semver extract", withFilter(semverSpec(">=1.0.0"), `(?P<n>[0-9]+)`, "$n.0.0"), []string{"app-1", "app-3"}, "app-3"},
		{"semver", semverSpec("*"), []string{"1.0.0", "1.2.0"}, "1.2.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tags := append(append([]string{}, referrerTags...), tt.images...)
			got, err := latest(t, tt.spec, tags)
			if err != nil || got != tt.want {
				t.Fatalf("Latest(%q) = %q, %v; want %q", tags, got, err, tt.want)
			}
		})
	}
}

func TestOnlyReferrerTags(t *testing.T) {
	for name, spec := range map[string]v1.ImagePolicySpec{
		"alphabetical": alphabeticalSpec(""),
		"numerical":    numericalSpec(""),
		"semver":       semverSpec("*"),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := latest(t, spec, referrerTags)
			if !errors.Is(err, ErrNoCandidates) {
				t.Fatalf("Latest() = %q, %v; want ErrNoCandidates", got, err)
			}
			if !strings.Contains(err.Error(), "signature, attestation or referrer") {
				t.Errorf("error %q does not say why", err)
			}
		})
	}
}
