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

func cosignSpec() *v1.OCIRepositoryVerification {
	return &v1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &v1.LocalObjectReference{Name: "cosign-keys"}}
}

func newVerifier(t *testing.T, keys ...*signing.CosignKey) *signature.Verifier {
	t.Helper()
	data := map[string][]byte{}
	for i, k := range keys {
		data[string(rune('a'+i))+".pub"] = k.PublicPEM
	}
	v, err := signature.New(cosignSpec(), data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestIntegrationVerify signs images of an in-process registry in each format cosign writes and
// checks each verdict, on a registry with the referrers API and on one with only the referrers
// tag schema.
func TestIntegrationVerify(t *testing.T) {
	trusted, other := signing.NewCosignKey(t), signing.NewCosignKey(t)
	tests := []struct {
		name string
		// sign signs the image (digest) and may use other, another image's digest.
		sign   func(t *testing.T, r *testenv.Registry, digest, other string)
		ok     bool
		reason string
	}{
		{"unsigned", func(*testing.T, *testenv.Registry, string, string) {}, false, "not signed"},
		{"legacy .sig, trusted key", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Legacy(t, signing.In(r, "app", d), trusted)
		}, true, ""},
		{"legacy .sig, another key", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Legacy(t, signing.In(r, "app", d), other)
		}, false,
			"no signature verifies with the trusted keys"},
		{"legacy .sig, another key then the trusted one", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Legacy(t, signing.In(r, "app", d), other)
			signing.Legacy(t, signing.In(r, "app", d), trusted)
		}, true, ""},
		{"legacy .sig over another digest", func(t *testing.T, r *testenv.Registry, d, o string) {
			signing.Legacy(t, signing.In(r, "app", d), trusted, signing.Over(o))
		}, false, "the signature is over another digest, " + "sha256:"},
		{"legacy .sig, tampered", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Legacy(t, signing.In(r, "app", d), trusted, signing.Tampered())
		}, false, "no signature verifies with the trusted keys"},
		{"bundle referrer, trusted key", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Bundle(t, signing.In(r, "app", d), trusted)
		}, true, ""},
		{"bundle referrer, another key", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Bundle(t, signing.In(r, "app", d), other)
		}, false,
			"no signature bundle verifies with the trusted keys"},
		{"bundle referrer over another digest", func(t *testing.T, r *testenv.Registry, d, o string) {
			signing.Bundle(t, signing.In(r, "app", d), trusted, signing.Over(o))
		}, false, "the signature bundle is over another digest"},
		{"bundle referrer, tampered", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Bundle(t, signing.In(r, "app", d), trusted, signing.Tampered())
		}, false, "no signature bundle verifies with the trusted keys"},
		{"bundle referrer that is an attestation", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Bundle(t, signing.In(r, "app", d), trusted, signing.Predicate("https://slsa.dev/provenance/v1"))
		}, false, `predicate type "https://slsa.dev/provenance/v1"`},
		{"both formats, only the bundle trusted", func(t *testing.T, r *testenv.Registry, d, _ string) {
			signing.Legacy(t, signing.In(r, "app", d), other)
			signing.Bundle(t, signing.In(r, "app", d), trusted)
		}, true, ""},
	}
	for _, mode := range []struct {
		name string
		opts []testenv.RegistryOption
	}{{"referrers API", []testenv.RegistryOption{testenv.RegistryReferrers()}}, {"referrers tag schema", nil}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					reg := testenv.NewRegistry(t, mode.opts...)
					digest := reg.Push(t, "app", "1.0.0")
					otherDigest := reg.Push(t, "app", "0.9.0")
					tt.sign(t, reg, digest, otherDigest)
					repo, err := name.NewRepository(reg.Image("app"), name.Insecure)
					if err != nil {
						t.Fatal(err)
					}
					ok, reason, err := newVerifier(t, trusted).Verify(context.Background(), repo, digest)
					if err != nil {
						t.Fatalf("Verify() error = %v", err)
					}
					if ok != tt.ok || !strings.Contains(reason, tt.reason) {
						t.Fatalf("Verify() = %v, %q; want %v, %q", ok, reason, tt.ok, tt.reason)
					}
					// The other image's signatures, if any were made, vouch for nothing here.
					if ok, _, _ := newVerifier(t, trusted).Verify(context.Background(), repo, otherDigest); ok {
						t.Errorf("Verify(%s) = true for an image nobody signed", otherDigest)
					}
				})
			}
		})
	}
}

func TestIntegrationVerifyAnyOfSeveralKeys(t *testing.T) {
	a, b := signing.NewCosignKey(t), signing.NewCosignKey(t)
	reg := testenv.NewRegistry(t)
	digest := reg.Push(t, "app", "1.0.0")
	signing.Bundle(t, signing.In(reg, "app", digest), b)
	repo, _ := name.NewRepository(reg.Image("app"), name.Insecure)
	if ok, reason, err := newVerifier(t, a, b).Verify(context.Background(), repo, digest); !ok || err != nil {
		t.Fatalf("Verify() = %v, %q, %v; want true", ok, reason, err)
	}
}

func TestIntegrationVerifyRegistryErrorIsNoVerdict(t *testing.T) {
	reg := testenv.NewRegistry(t)
	digest := reg.Push(t, "app", "1.0.0")
	reg.Inject(testenv.RegistryUnauthorized().On(".sig"), testenv.RegistryUnauthorized().On(".sig"))
	repo, _ := name.NewRepository(reg.Image("app"), name.Insecure)
	_, _, err := newVerifier(t, signing.NewCosignKey(t)).Verify(context.Background(), repo, digest)
	if err == nil {
		t.Fatal("Verify() with a failing registry gave a verdict")
	}
}

func TestNewRefuses(t *testing.T) {
	key := signing.NewCosignKey(t)
	tests := []struct {
		name    string
		spec    *v1.OCIRepositoryVerification
		data    map[string][]byte
		is      error
		mention string
	}{
		{"another provider", &v1.OCIRepositoryVerification{Provider: "sigstore", SecretRef: &v1.LocalObjectReference{Name: "x"}}, nil,
			signature.ErrUnsupported, `provider "sigstore"`},
		{"keyless", &v1.OCIRepositoryVerification{Provider: "cosign"}, nil, signature.ErrUnsupported, "keyless"},
		{"no .pub", cosignSpec(), map[string][]byte{"cosign.key": key.PublicPEM}, signature.ErrKeys, "no public key"},
		{"not PEM", cosignSpec(), map[string][]byte{"cosign.pub": []byte("hello")}, signature.ErrKeys, `"cosign.pub": not PEM-encoded`},
		{"a private key", cosignSpec(), map[string][]byte{"cosign.pub": []byte("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nc2VjcmV0\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")},
			signature.ErrKeys, `PEM block of type "ENCRYPTED SIGSTORE PRIVATE KEY"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := signature.New(tt.spec, tt.data)
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("New() error = %v; want %v mentioning %q", err, tt.is, tt.mention)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") {
				t.Errorf("error %q quotes the key material", err)
			}
		})
	}
}
