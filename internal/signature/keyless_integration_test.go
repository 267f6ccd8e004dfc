package signature_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/signature"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/signing"
)

const (
	ciIssuer  = "https://token.actions.githubusercontent.com"
	ciSubject = "https://github.com/org/app/.github/workflows/release.yaml@refs/heads/main"
)

func keylessSpec(ids ...v1.OIDCIdentityMatch) *v1.OCIRepositoryVerification {
	return &v1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &v1.LocalObjectReference{Name: "sigstore"}, MatchOIDCIdentity: ids}
}

// TestIntegrationVerifyKeyless signs images with a Sigstore deployment made for the test and
// verifies them under its trusted root, as a Secret's trusted_root.json gives it: the identity,
// the certificate's validity at the log entry's time and the digest are each checked.
func TestIntegrationVerifyKeyless(t *testing.T) {
	sigstore, otherSigstore := signing.NewSigstore(t), signing.NewSigstore(t)
	ids := []v1.OIDCIdentityMatch{
		{Issuer: "^https://accounts.example.com$", Subject: "^ops@example.com$"},
		{Issuer: "^" + ciIssuer + "$", Subject: "^https://github.com/org/app/.*$"},
	}
	tests := []struct {
		name   string
		sign   func(t *testing.T, r *testenv.Registry, digest, other string)
		ok     bool
		reason string
	}{
		{"the CI identity", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Keyless(t, signing.In(r, "app", d), sigstore.Identity(ciSubject, ciIssuer))
		}, true, ""},
		{"another matched identity", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Keyless(t, signing.In(r, "app", d), sigstore.Identity("ops@example.com", "https://accounts.example.com"))
		}, true, ""},
		{"another repository's workflow", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Keyless(t, signing.In(r, "app", d), sigstore.Identity("https://github.com/evil/app/.github/workflows/x.yaml@refs/heads/main", ciIssuer))
		}, false, "signed by https://github.com/evil/app/.github/workflows/x.yaml@refs/heads/main (issuer " + ciIssuer + ") that matchOIDCIdentity does not match"},
		{"the right subject from another issuer", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Keyless(t, signing.In(r, "app", d), sigstore.Identity(ciSubject, "https://issuer.example.org"))
		}, false, "that matchOIDCIdentity does not match"},
		{"another Sigstore", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Keyless(t, signing.In(r, "app", d), otherSigstore.Identity(ciSubject, ciIssuer))
		}, false, "no signature bundle verifies under the trusted root"},
		{"an expired certificate", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Keyless(t, signing.In(r, "app", d), sigstore.Identity(ciSubject, ciIssuer), signing.Expired())
		}, false, "no signature bundle verifies under the trusted root"},
		{"over another digest", func(t *testing.T, r *testenv.Registry, d, o string) {
			signing.Keyless(t, signing.In(r, "app", d), sigstore.Identity(ciSubject, ciIssuer), signing.Over(o))
		}, false, "the signature bundle is over another digest"},
		{"a keyless attestation", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Keyless(t, signing.In(r, "app", d), sigstore.Identity(ciSubject, ciIssuer), signing.Predicate("https://slsa.dev/provenance/v1"))
		}, false, "not an image signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := testenv.NewRegistry(t)
			digest := reg.Push(t, "app", "1.0.0")
			other := reg.Push(t, "app", "0.9.0")
			tt.sign(t, reg, digest, other)
			v, err := signature.New(keylessSpec(ids...), map[string][]byte{signature.TrustedRootKey: sigstore.TrustedRootJSON(t)})
			if err != nil {
				t.Fatal(err)
			}
			repo, _ := name.NewRepository(reg.Image("app"), name.Insecure)
			ok, reason, err := v.Verify(context.Background(), repo, digest)
			if err != nil {
				t.Fatalf("Verify() error = %v", err)
			}
			if ok != tt.ok || !strings.Contains(reason, tt.reason) {
				t.Fatalf("Verify() = %v, %q; want %v, %q", ok, reason, tt.ok, tt.reason)
			}
		})
	}
}

func TestNewKeylessRefuses(t *testing.T) {
	sigstore := signing.NewSigstore(t)
	tests := []struct {
		name    string
		spec    *v1.OCIRepositoryVerification
		data    map[string][]byte
		keys    bool
		mention string
	}{
		{"no identity", keylessSpec(), map[string][]byte{signature.TrustedRootKey: sigstore.TrustedRootJSON(t)}, false, "at least one matchOIDCIdentity"},
		{"not a trusted root", keylessSpec(v1.OIDCIdentityMatch{Issuer: ".*", Subject: ".*"}),
			map[string][]byte{signature.TrustedRootKey: []byte(`{"mediaType": "nope"}`)}, true, `"trusted_root.json": not a Sigstore trusted root`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := signature.New(tt.spec, tt.data)
			if err == nil || errors.Is(err, signature.ErrKeys) != tt.keys || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("New() error = %v; want one mentioning %q (ErrKeys: %v)", err, tt.mention, tt.keys)
			}
		})
	}
}
