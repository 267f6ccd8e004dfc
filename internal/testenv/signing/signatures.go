package signing

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"google.golang.org/protobuf/encoding/protojson"
)

// The formats cosign writes, as a verifier must read them.
const (
	cosignSimpleSigning  = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSigAnnotation  = "dev.cosignproject.cosign/signature"
	sigstoreBundleV03    = "application/vnd.dev.sigstore.bundle.v0.3+json"
	cosignSignPredicate  = "https://sigstore.dev/cosign/sign/v1"
	inTotoPayloadType    = "application/vnd.in-toto+json"
	inTotoStatementV1    = "https://in-toto.io/Statement/v1"
	ociEmptyConfigType   = "application/vnd.oci.empty.v1+json"
	bundleContentAnnot   = "dev.sigstore.bundle.content"
	bundlePredicateAnnot = "dev.sigstore.bundle.predicateType"
)

// CosignKey is a signing key pair made for a test, as `cosign generate-key-pair` makes one:
// ECDSA P-256, its public half PEM-encoded (PKIX) for a Secret's cosign.pub.
type CosignKey struct {
	kp *sign.EphemeralKeypair
	// PublicPEM is the public key as cosign.pub holds it.
	PublicPEM []byte
}

// NewCosignKey makes a key pair.
func NewCosignKey(t testing.TB) *CosignKey {
	t.Helper()
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		t.Fatalf("cosign key: %v", err)
	}
	pub, err := kp.GetPublicKeyPem()
	if err != nil {
		t.Fatalf("cosign key: %v", err)
	}
	return &CosignKey{kp: kp, PublicPEM: []byte(pub)}
}

// Option changes how a signature is made, to make the signatures a verifier must refuse.
type Option func(*signConfig)

type signConfig struct {
	over     string
	tamper   bool
	expired  bool
	predType string
}

// Over makes the signed payload name digest instead of the image's: a valid signature of
// another image, copied beside this one.
func Over(digest string) Option { return func(c *signConfig) { c.over = digest } }

// Tampered changes the signed payload after signing, as an attacker editing it would.
func Tampered() Option { return func(c *signConfig) { c.tamper = true } }

// Predicate makes the bundle's statement of another predicate type: an attestation, not a
// signature.
func Predicate(predicateType string) Option {
	return func(c *signConfig) { c.predType = predicateType }
}

// Legacy signs the image digest of m with key as `cosign sign --key --tlog-upload=false`
// writes a signature without the new bundle format: a simple-signing payload, one layer of the
// manifest tagged sha256-<hex>.sig, with the base64 signature in the layer's
// dev.cosignproject.cosign/signature annotation. A second signature of the same digest is one
// more layer on the same tag, as cosign appends it.
func Legacy(t testing.TB, m Manifest, key *CosignKey, opts ...Option) {
	t.Helper()
	signLegacy(t, m.target(t), key, opts...)
}

func signLegacy(t testing.TB, at signTarget, key *CosignKey, opts ...Option) {
	t.Helper()
	repo, digest, direct := at.repo, at.digest, at.direct
	c := signConfig{over: digest}
	for _, o := range opts {
		o(&c)
	}
	payload, err := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": repo.Name()},
			"image":    map[string]string{"docker-manifest-digest": c.over},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	sig, _, err := key.kp.SignData(context.Background(), payload)
	if err != nil {
		t.Fatalf("signing %s@%s: %v", repo.Name(), digest, err)
	}
	if c.tamper {
		payload = bytes.Replace(payload, []byte(`"optional":null`), []byte(`"optional":{"x":1}`), 1)
	}
	tag := repo.Tag(strings.Replace(digest, ":", "-", 1) + ".sig")
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	if prev, err := remote.Image(tag, direct); err == nil {
		base = prev
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:       static.NewLayer(payload, cosignSimpleSigning),
		Annotations: map[string]string{cosignSigAnnotation: base64.StdEncoding.EncodeToString(sig)},
		MediaType:   cosignSimpleSigning,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, direct); err != nil {
		t.Fatalf("writing %s: %v", tag, err)
	}
}

// Bundle signs the image digest of m with key as cosign v3 does by default: a Sigstore
// bundle (v0.3) whose DSSE envelope holds an in-toto statement of predicate type
// https://sigstore.dev/cosign/sign/v1 about the digest, attached as an OCI 1.1 referrer of the
// image (artifactType application/vnd.dev.sigstore.bundle.v0.3+json). On a registry without
// the referrers API, go-containerregistry updates the referrers tag schema's index instead.
func Bundle(t testing.TB, m Manifest, key *CosignKey, opts ...Option) {
	t.Helper()
	signBundle(t, m.target(t), key, opts...)
}

func signBundle(t testing.TB, at signTarget, key *CosignKey, opts ...Option) {
	t.Helper()
	repo, digest := at.repo, at.digest
	c := signConfig{over: digest, predType: cosignSignPredicate}
	for _, o := range opts {
		o(&c)
	}
	statement := statementJSON(t, repo, c)
	b, err := sign.Bundle(&sign.DSSEData{Data: statement, PayloadType: inTotoPayloadType}, key.kp, sign.BundleOptions{})
	if err != nil {
		t.Fatalf("signing %s@%s: %v", repo.Name(), digest, err)
	}
	if c.tamper {
		env := b.GetDsseEnvelope()
		env.Payload = bytes.Replace(env.Payload, []byte(`"predicate":{}`), []byte(`"predicate":{"x":1}`), 1)
	}
	bundleJSON, err := protojson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	attach(t, at, sigstoreBundleV03, static.NewLayer(bundleJSON, sigstoreBundleV03),
		map[string]string{bundleContentAnnot: "dsse-envelope", bundlePredicateAnnot: c.predType})
}

// attach pushes an artifact manifest of one layer whose subject is the image at, built by hand
// as cosign v3 writes it: go-containerregistry's mutate cannot set artifactType.
func attach(t testing.TB, at signTarget, artifactType string, layer v1.Layer, annotations map[string]string) {
	t.Helper()
	subject, direct := at.repo.Digest(at.digest), at.direct
	sd, err := remote.Head(subject, direct)
	if err != nil {
		t.Fatalf("attaching to %s: %v", subject, err)
	}
	config := static.NewLayer([]byte("{}"), ociEmptyConfigType)
	for _, l := range []v1.Layer{config, layer} {
		if err := remote.WriteLayer(subject.Context(), l, direct); err != nil {
			t.Fatalf("attaching to %s: %v", subject, err)
		}
	}
	descriptor := func(l v1.Layer) v1.Descriptor {
		d, _ := l.Digest()
		size, _ := l.Size()
		mt, _ := l.MediaType()
		return v1.Descriptor{MediaType: mt, Digest: d, Size: size}
	}
	raw, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        descriptor(config),
		Layers:        []v1.Descriptor{descriptor(layer)},
		Subject:       &v1.Descriptor{MediaType: sd.MediaType, Digest: sd.Digest, Size: sd.Size},
		Annotations:   annotations,
	})
	if err != nil {
		t.Fatal(err)
	}
	// v1.Manifest has no artifactType field; it goes in after mediaType.
	raw = bytes.Replace(raw, []byte(`"mediaType":"`+string(types.OCIManifestSchema1)+`",`),
		[]byte(`"mediaType":"`+string(types.OCIManifestSchema1)+`","artifactType":"`+artifactType+`",`), 1)
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(subject.Context().Digest(h.String()), rawManifest{raw, types.OCIManifestSchema1}, direct); err != nil {
		t.Fatalf("attaching to %s: %v", subject, err)
	}
}

// rawManifest is a manifest to push as it is.
type rawManifest struct {
	raw       []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }
