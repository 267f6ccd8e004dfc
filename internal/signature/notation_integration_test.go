package signature_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/signature"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/signing"
)

func notationSpec() *v1.OCIRepositoryVerification {
	return &v1.OCIRepositoryVerification{Provider: "notation", SecretRef: &v1.LocalObjectReference{Name: "notation"}}
}

func newNotationVerifier(t *testing.T, ca *signing.NotationCA, scopes ...string) *signature.Verifier {
	t.Helper()
	v, err := signature.New(notationSpec(), map[string][]byte{
		"ca.crt": ca.CertPEM, signature.TrustPolicyKey: signing.NotationTrustPolicy(scopes...)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// notationCase signs the image digest (and may use other, another image's digest) in the
// registry of image, with the trusted CA or another.
type notationCase struct {
	name   string
	sign   func(t *testing.T, sign notationSign, digest, other string)
	scope  string // the trust policy's registryScope; empty for the image's repository
	ok     bool
	reason string
}

// notationSign signs digest with ca in the registry under test.
type notationSign func(t *testing.T, digest string, ca *signing.NotationCA, opts ...signing.Option)

func notationCases(trusted, other *signing.NotationCA) []notationCase {
	return []notationCase{
		{name: "unsigned", sign: func(*testing.T, notationSign, string, string) {}, reason: "not signed"},
		{name: "trusted CA", sign: func(t *testing.T, s notationSign, d, _ string) { s(t, d, trusted) }, ok: true},
		{name: "another CA", sign: func(t *testing.T, s notationSign, d, _ string) { s(t, d, other) },
			reason: "signed, but not by a certificate the trust policy trusts"},
		{name: "another CA then the trusted one", sign: func(t *testing.T, s notationSign, d, _ string) {
			s(t, d, other)
			s(t, d, trusted)
		}, ok: true},
		{name: "over another digest", sign: func(t *testing.T, s notationSign, d, o string) {
			s(t, d, trusted, signing.Over(o))
		}, reason: "the Notation signature is over another digest, sha256:"},
		{name: "tampered", sign: func(t *testing.T, s notationSign, d, _ string) {
			s(t, d, trusted, signing.Tampered())
		}, reason: "a Notation signature envelope that does not verify (tampered or malformed)"},
		{name: "expired certificate", sign: func(t *testing.T, s notationSign, d, _ string) {
			s(t, d, trusted, signing.Expired())
		}, reason: "the signing certificate has expired or is not yet valid"},
		{name: "a scope of another repository", sign: func(t *testing.T, s notationSign, d, _ string) { s(t, d, trusted) },
			scope: "registry.example/other", reason: "no statement of trustpolicy.json has a registryScope that covers 127.0.0.1:"},
		{name: "the wildcard scope", sign: func(t *testing.T, s notationSign, d, _ string) { s(t, d, trusted) }, scope: "*", ok: true},
	}
}

// check verifies digest of image and the case's verdict; the other image's signatures, if any
// were made, vouch for nothing.
func (tt notationCase) check(t *testing.T, trusted *signing.NotationCA, image, digest, otherDigest string) {
	t.Helper()
	repo, err := name.NewRepository(image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	scope := tt.scope
	if scope == "" {
		scope = image
	}
	v := newNotationVerifier(t, trusted, scope)
	ok, reason, err := v.Verify(context.Background(), repo, digest)
	if err != nil {
		t.Fatalf("Verify() error = %v", err)
	}
	if ok != tt.ok || !strings.Contains(reason, tt.reason) {
		t.Fatalf("Verify() = %v, %q; want %v, %q", ok, reason, tt.ok, tt.reason)
	}
	t.Logf("Verify() = %v, %q", ok, reason)
	if len(reason) > 1000 || strings.Contains(reason, "BEGIN") {
		t.Errorf("reason %q is unbounded or quotes a certificate", reason)
	}
	if ok, _, _ := v.Verify(context.Background(), repo, otherDigest); ok && tt.scope != "*" {
		t.Errorf("Verify(%s) = true for an image nobody signed", otherDigest)
	}
}

// TestIntegrationVerifyNotation signs images as `notation sign` does, with notation-go's signer
// and a CA and leaf certificates made for the test, pushed through oras-go as OCI 1.1 referrers,
// and checks each verdict: on go-containerregistry's registry with the referrers API and
// without it (the referrers tag schema).
func TestIntegrationVerifyNotation(t *testing.T) {
	trusted, other := signing.NewNotationCA(t), signing.NewNotationCA(t)
	for _, mode := range []struct {
		name string
		opts []testenv.RegistryOption
	}{{"referrers API", []testenv.RegistryOption{testenv.RegistryReferrers()}}, {"referrers tag schema", nil}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, tt := range notationCases(trusted, other) {
				t.Run(tt.name, func(t *testing.T) {
					reg := testenv.NewRegistry(t, mode.opts...)
					digest := reg.Push(t, "app", "1.0.0")
					otherDigest := reg.Push(t, "app", "0.9.0")
					tt.sign(t, func(t *testing.T, d string, ca *signing.NotationCA, opts ...signing.Option) {
						signing.Notation(t, signing.In(reg, "app", d), ca, opts...)
					}, digest, otherDigest)
					tt.check(t, trusted, reg.Image("app"), digest, otherDigest)
				})
			}
		})
	}
}

// TestIntegrationVerifyNotationDockerRegistry runs the same cases on Debian's docker-registry,
// which has no referrers API: Notation's signatures are found under the referrers tag schema.
func TestIntegrationVerifyNotationDockerRegistry(t *testing.T) {
	host := testenv.NewDockerRegistry(t)
	trusted, other := signing.NewNotationCA(t), signing.NewNotationCA(t)
	for i, tt := range notationCases(trusted, other) {
		t.Run(tt.name, func(t *testing.T) {
			image := host + "/case" + string(rune('a'+i)) + "/app"
			digest, otherDigest := pushRandom(t, image+":1.0.0"), pushRandom(t, image+":0.9.0")
			tt.sign(t, func(t *testing.T, d string, ca *signing.NotationCA, opts ...signing.Option) {
				signing.Notation(t, signing.At(image, d), ca, opts...)
			}, digest, otherDigest)
			tt.check(t, trusted, image, digest, otherDigest)
		})
	}
}

// pushRandom pushes a random image to ref over plain HTTP and returns its digest.
func pushRandom(t *testing.T, ref string) string {
	t.Helper()
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func TestIntegrationVerifyNotationRegistryErrorIsNoVerdict(t *testing.T) {
	ca := signing.NewNotationCA(t)
	for _, path := range []string{"/referrers/", "/blobs/"} {
		t.Run(path, func(t *testing.T) {
			reg := testenv.NewRegistry(t, testenv.RegistryReferrers())
			digest := reg.Push(t, "app", "1.0.0")
			signing.Notation(t, signing.In(reg, "app", digest), ca)
			reg.Inject(testenv.RegistryServerError().On(path), testenv.RegistryServerError().On(path),
				testenv.RegistryServerError().On(path), testenv.RegistryServerError().On(path))
			repo, _ := name.NewRepository(reg.Image("app"), name.Insecure)
			ok, reason, err := newNotationVerifier(t, ca, reg.Image("app")).Verify(context.Background(), repo, digest)
			if err == nil {
				t.Fatalf("Verify() with a failing registry = %v, %q; want an error and no verdict", ok, reason)
			}
		})
	}
}

// TestNotationID checks that the verifier's ID, which keys remembered verdicts, changes with
// the trust store and with the trust policy.
func TestNotationID(t *testing.T) {
	a, b := signing.NewNotationCA(t), signing.NewNotationCA(t)
	id := func(ca []byte, policy []byte) string {
		v, err := signature.New(notationSpec(), map[string][]byte{"ca.crt": ca, signature.TrustPolicyKey: policy})
		if err != nil {
			t.Fatal(err)
		}
		return v.ID()
	}
	base := id(a.CertPEM, signing.NotationTrustPolicy("r.example/app"))
	if again := id(a.CertPEM, signing.NotationTrustPolicy("r.example/app")); again != base {
		t.Errorf("the same Secret gave IDs %s and %s", base, again)
	}
	if other := id(b.CertPEM, signing.NotationTrustPolicy("r.example/app")); other == base {
		t.Error("another trust store kept the ID")
	}
	if other := id(a.CertPEM, signing.NotationTrustPolicy("r.example/other")); other == base {
		t.Error("another trust policy kept the ID")
	}
	if both := id(append(append([]byte{}, a.CertPEM...), b.CertPEM...), signing.NotationTrustPolicy("r.example/app")); both == base {
		t.Error("a trust store with one more certificate kept the ID")
	}
	if v, _ := signature.New(cosignSpec(), map[string][]byte{"cosign.pub": signing.NewCosignKey(t).PublicPEM}); v.ID() == base {
		t.Error("a cosign verifier has the ID of a Notation one")
	}
}

func TestNewNotationRefuses(t *testing.T) {
	ca := signing.NewNotationCA(t)
	policy := signing.NotationTrustPolicy("r.example/app")
	const secretB64 = "c2VjcmV0LWtleS1tYXRlcmlhbA=="
	privateKey := []byte("-----BEGIN EC PRIVATE KEY-----\n" + secretB64 + "\n-----END EC PRIVATE KEY-----\n")
	garbledCert := []byte("-----BEGIN CERTIFICATE-----\n" + secretB64 + "\n-----END CERTIFICATE-----\n")
	tests := []struct {
		name    string
		spec    *v1.OCIRepositoryVerification
		data    map[string][]byte
		mention string
	}{
		{"no secretRef", &v1.OCIRepositoryVerification{Provider: "notation"}, nil, "needs a secretRef"},
		{"no trust policy", notationSpec(), map[string][]byte{"ca.crt": ca.CertPEM}, "no trustpolicy.json"},
		{"no certificate", notationSpec(), map[string][]byte{signature.TrustPolicyKey: policy}, "no certificate"},
		{"a private key as ca.crt", notationSpec(), map[string][]byte{"ca.crt": privateKey, signature.TrustPolicyKey: policy},
			`"ca.crt": PEM block 1 is of type "EC PRIVATE KEY", not CERTIFICATE`},
		{"a garbled certificate", notationSpec(), map[string][]byte{"ca.pem": garbledCert, signature.TrustPolicyKey: policy},
			`"ca.pem": PEM block 1 is not an X.509 certificate`},
		{"not PEM", notationSpec(), map[string][]byte{"ca.crt": []byte(secretB64), signature.TrustPolicyKey: policy},
			`"ca.crt": neither PEM CERTIFICATE blocks nor DER certificates`},
		{"data after the certificate", notationSpec(), map[string][]byte{"ca.crt": append(append([]byte{}, ca.CertPEM...), secretB64...), signature.TrustPolicyKey: policy},
			`"ca.crt": data after the last PEM block`},
		{"a trust policy that is not JSON", notationSpec(), map[string][]byte{"ca.crt": ca.CertPEM, signature.TrustPolicyKey: []byte(`{"version": ` + secretB64)},
			`"trustpolicy.json": not a JSON trust policy document: a syntax error at byte`},
		{"a trust policy of another version", notationSpec(), map[string][]byte{"ca.crt": ca.CertPEM,
			signature.TrustPolicyKey: []byte(strings.Replace(string(policy), `"1.0"`, `"9.9"`, 1))}, `"trustpolicy.json": `},
		{"a trust policy without statements", notationSpec(), map[string][]byte{"ca.crt": ca.CertPEM,
			signature.TrustPolicyKey: []byte(`{"version":"1.0","trustPolicies":[]}`)}, `"trustpolicy.json": `},
		{"a trust policy too large", notationSpec(), map[string][]byte{"ca.crt": ca.CertPEM,
			signature.TrustPolicyKey: []byte(`{"version":"1.0","x":"` + strings.Repeat("a", 100<<10) + `"}`)}, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := signature.New(tt.spec, tt.data)
			if !errors.Is(err, signature.ErrKeys) || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("New() error = %v; want ErrKeys mentioning %q", err, tt.mention)
			}
			if strings.Contains(err.Error(), secretB64[:12]) || strings.Contains(err.Error(), "BEGIN") || len(err.Error()) > 600 {
				t.Errorf("error %q quotes the Secret or is unbounded", err)
			}
		})
	}
}
