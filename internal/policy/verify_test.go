package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

func TestNewSelectorInvalidVerify(t *testing.T) {
	tests := []struct {
		name    string
		verify  v1.OCIRepositoryVerification
		mention string
	}{
		{"unknown provider", v1.OCIRepositoryVerification{Provider: "gpg"}, `verify provider "gpg"`},
		{"secretRef without a name", v1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &v1.LocalObjectReference{}}, "secretRef: name"},
		{"bad issuer", v1.OCIRepositoryVerification{MatchOIDCIdentity: []v1.OIDCIdentityMatch{{Issuer: "^(https", Subject: ".*"}}},
			`matchOIDCIdentity[0].issuer "^(https"`},
		{"bad subject", v1.OCIRepositoryVerification{MatchOIDCIdentity: []v1.OIDCIdentityMatch{{Issuer: ".*", Subject: ".*"}, {Issuer: ".*", Subject: "a[z"}}},
			`matchOIDCIdentity[1].subject "a[z"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := semverSpec("*")
			spec.Verify = &tt.verify
			_, err := NewSelector(spec)
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("NewSelector() error = %v; want ErrInvalidPolicy mentioning %q", err, tt.mention)
			}
		})
	}
	for _, ok := range []v1.OCIRepositoryVerification{
		{Provider: "cosign", SecretRef: &v1.LocalObjectReference{Name: "keys"}},
		{Provider: "notation", SecretRef: &v1.LocalObjectReference{Name: "trust"}},
		{Provider: "cosign", MatchOIDCIdentity: []v1.OIDCIdentityMatch{{Issuer: "^https://token.actions.githubusercontent.com$", Subject: "^https://github.com/org/.*$"}}},
	} {
		spec := semverSpec("*")
		spec.Verify = &ok
		if _, err := NewSelector(spec); err != nil {
			t.Errorf("NewSelector(verify %+v) = %v", ok, err)
		}
	}
}

func TestRanked(t *testing.T) {
	tags := []string{"1.0.0", "1.2.0", "latest", "1.1.0", "sha256-" + hex64 + ".sig", "2.0.0-rc.1", "0.9.0"}
	tests := []struct {
		name string
		spec v1.ImagePolicySpec
		n    int
		want []string
	}{
		{"semver, all", semverSpec("*"), 10, []string{"1.2.0", "1.1.0", "1.0.0", "0.9.0"}},
		{"semver, bounded", semverSpec("*"), 2, []string{"1.2.0", "1.1.0"}},
		{"alphabetical desc", alphabeticalSpec("desc"), 3, []string{"0.9.0", "1.0.0", "1.1.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSelector(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Ranked(tags, tt.n)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("Ranked() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	s, _ := NewSelector(semverSpec("^3"))
	if got, err := s.Ranked(tags, 5); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("Ranked() with no candidate = %q, %v; want ErrNoCandidates", got, err)
	}
}
