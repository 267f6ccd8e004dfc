package signing

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/notaryproject/notation-core-go/signature"
	"github.com/notaryproject/notation-go"
	notationregistry "github.com/notaryproject/notation-go/registry"
	notationsigner "github.com/notaryproject/notation-go/signer"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	orasremote "oras.land/oras-go/v2/registry/remote"
)

// NotationCA is a certificate authority made for a test, as a Notation user's trust store holds
// it (the Secret's ca.crt), which issues the code-signing certificates that sign images.
type NotationCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA's certificate, PEM-encoded.
	CertPEM []byte

	mu     sync.Mutex
	signer notation.Signer
	serial int64
}

// NewNotationCA makes a CA.
func NewNotationCA(t testing.TB) *NotationCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "testenv Notation CA", Organization: []string{"reflector tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &NotationCA{cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue returns a Notation signer with a new leaf certificate of the CA: ECDSA P-256, key usage
// digitalSignature and extended key usage codeSigning, as Notation requires, valid until
// notAfter.
func (ca *NotationCA) issue(t testing.TB, notAfter time.Time) notation.Signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.mu.Lock()
	ca.serial++
	serial := ca.serial
	ca.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("signer %d", serial), Organization: []string{"reflector tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	s, err := notationsigner.NewGenericSigner(key, []*x509.Certificate{leaf, ca.cert})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// leafSigner returns the CA's signer with a leaf certificate valid for the next hours.
func (ca *NotationCA) leafSigner(t testing.TB) notation.Signer {
	t.Helper()
	ca.mu.Lock()
	s := ca.signer
	ca.mu.Unlock()
	if s == nil {
		s = ca.issue(t, time.Now().Add(12*time.Hour))
		ca.mu.Lock()
		ca.signer = s
		ca.mu.Unlock()
	}
	return s
}

// NotationTrustPolicy returns a Notation trust policy document (version 1.0) of one statement
// at verification level strict that trusts the certificates of the trust store ca:reflector
// for the repositories of scopes, host/repository as Notation names them, or "*".
func NotationTrustPolicy(scopes ...string) []byte {
	b, err := json.Marshal(map[string]any{
		"version": "1.0",
		"trustPolicies": []map[string]any{{
			"name":                  "reflector",
			"registryScopes":        scopes,
			"signatureVerification": map[string]string{"level": "strict"},
			"trustStores":           []string{"ca:reflector"},
			"trustedIdentities":     []string{"*"},
		}},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// Notation signs the image digest of m with a leaf certificate of ca as `notation sign`
// does: notation-go signs the manifest's descriptor in a JWS envelope and pushes it, through
// oras-go, as an OCI 1.1 referrer of the image (config media type
// application/vnd.cncf.notary.signature, one layer holding the envelope), or, on a registry
// without the referrers API, under the referrers tag schema. Over signs another image's
// descriptor, Tampered edits the envelope's payload after signing, and Expired signs
// with a certificate that has expired by the time Notation returns.
func Notation(t testing.TB, m Manifest, ca *NotationCA, opts ...Option) {
	t.Helper()
	signNotation(t, notationTarget{m.Image, m.Digest, &http.Client{Transport: m.transport()}}, ca, opts...)
}

// notationTarget is an image to sign with Notation: the manifest digest dgst of image
// (host/path), reached with client.
type notationTarget struct {
	image, dgst string
	client      *http.Client
}

func signNotation(t testing.TB, at notationTarget, ca *NotationCA, opts ...Option) {
	t.Helper()
	image, dgst, client := at.image, at.dgst, at.client
	c := signConfig{over: dgst}
	for _, o := range opts {
		o(&c)
	}
	ctx := context.Background()
	target, err := orasremote.NewRepository(image)
	if err != nil {
		t.Fatal(err)
	}
	target.Client = client
	target.PlainHTTP = true
	s := ca.leafSigner(t)
	var notAfter time.Time
	if c.expired {
		// Notation refuses to sign with an expired certificate: this one expires a moment
		// after signing.
		notAfter = time.Now().Truncate(time.Second).Add(2 * time.Second)
		s = ca.issue(t, notAfter)
	}
	w := &notationTestSigner{inner: s, tamper: c.tamper}
	if c.over != dgst {
		over, err := name.NewDigest(image+"@"+c.over, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		d, err := remote.Head(over, remote.WithTransport(client.Transport))
		if err != nil {
			t.Fatalf("HEAD %s: %v", over, err)
		}
		w.over = &ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}
	}
	_, err = notation.Sign(ctx, w, notationregistry.NewRepository(target), notation.SignOptions{
		SignerSignOptions: notation.SignerSignOptions{SignatureMediaType: "application/jose+json"},
		ArtifactReference: image + "@" + dgst,
	})
	if err != nil {
		t.Fatalf("signing %s@%s: %v", image, dgst, err)
	}
	if c.expired {
		time.Sleep(time.Until(notAfter.Add(time.Second)))
	}
}

// notationTestSigner signs with inner, over another descriptor than the one asked for or with
// its payload edited afterwards, to make signatures a verifier must refuse.
type notationTestSigner struct {
	inner  notation.Signer
	over   *ocispec.Descriptor
	tamper bool
}

func (s *notationTestSigner) Sign(ctx context.Context, desc ocispec.Descriptor, opts notation.SignerSignOptions) ([]byte, *signature.SignerInfo, error) {
	if s.over != nil {
		desc = *s.over
	}
	env, info, err := s.inner.Sign(ctx, desc, opts)
	if err != nil || !s.tamper {
		return env, info, err
	}
	// A JWS envelope in the JSON serialization: its payload is base64url of the JSON payload
	// {"targetArtifact": descriptor}; the size is changed, so it decodes and describes a
	// manifest, but not what was signed.
	var jws map[string]any
	if err := json.Unmarshal(env, &jws); err != nil {
		return nil, nil, err
	}
	p, err := base64.RawURLEncoding.DecodeString(jws["payload"].(string))
	if err != nil {
		return nil, nil, err
	}
	size := fmt.Sprintf(`"size":%d`, desc.Size)
	if !bytes.Contains(p, []byte(size)) {
		return nil, nil, fmt.Errorf("no %s in the payload %s", size, p)
	}
	p = bytes.Replace(p, []byte(size), []byte(fmt.Sprintf(`"size":%d`, desc.Size+1)), 1)
	jws["payload"] = base64.RawURLEncoding.EncodeToString(p)
	out, err := json.Marshal(jws)
	return out, info, err
}
