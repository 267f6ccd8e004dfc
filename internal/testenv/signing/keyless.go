package signing

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/static"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"google.golang.org/protobuf/encoding/protojson"
)

// Sigstore is a Sigstore deployment made for a test (sigstore-go's testing/ca): a Fulcio
// certificate authority, a Rekor log, a CT log and a timestamping authority, all in memory. It
// signs keyless as cosign does against a private deployment, and TrustedRootJSON is the
// trusted_root.json that verifies what it signs.
type Sigstore struct {
	vs *ca.VirtualSigstore
}

// NewSigstore makes a Sigstore deployment.
func NewSigstore(t testing.TB) *Sigstore {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatalf("test Sigstore: %v", err)
	}
	return &Sigstore{vs: vs}
}

// TrustedRootJSON returns the deployment's trusted root, as trusted_root.json holds it.
func (s *Sigstore) TrustedRootJSON(t testing.TB) []byte {
	t.Helper()
	return s.trustedRootJSON(t, rawLogIDs(t, s.vs.CTLogs()))
}

// TrustedRootWithoutCTJSON returns the deployment's trusted root without its certificate
// transparency log: the certificates this deployment issues carry no signed certificate
// timestamp, which a verifier requires under a root that lists a CT log, as cosign does.
func (s *Sigstore) TrustedRootWithoutCTJSON(t testing.TB) []byte {
	t.Helper()
	return s.trustedRootJSON(t, nil)
}

func (s *Sigstore) trustedRootJSON(t testing.TB, ctLogs map[string]*root.TransparencyLog) []byte {
	t.Helper()
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, s.vs.FulcioCertificateAuthorities(), ctLogs,
		s.vs.TimestampingAuthorities(), rawLogIDs(t, s.vs.RekorLogs()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawLogIDs gives each log the ID a trusted root holds, the raw key ID, where testing/ca, which
// serves as trusted material itself, keeps its hex.
func rawLogIDs(t testing.TB, logs map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
	t.Helper()
	for id, l := range logs {
		raw, err := hex.DecodeString(id)
		if err != nil {
			t.Fatalf("log ID %q: %v", id, err)
		}
		l.ID = raw
	}
	return logs
}

// Keyless signs the image digest of m as cosign v3 signs keyless: a certificate from the
// deployment's Fulcio for the OIDC identity subject of issuer, the signed statement of
// Bundle, its Rekor entry with an inclusion proof, attached as an OCI 1.1 referrer.
// Over and Predicate apply; Expired signs after the certificate expired.
func Keyless(t testing.TB, m Manifest, id KeylessIdentity, opts ...Option) {
	t.Helper()
	signKeyless(t, m.target(t), id, opts...)
}

// KeylessIdentity is an OIDC identity, subject of issuer, that a Sigstore deployment's Fulcio
// certifies for keyless signing.
type KeylessIdentity struct {
	sigstore        *Sigstore
	subject, issuer string
}

// Identity returns the identity subject of issuer as s certifies it.
func (s *Sigstore) Identity(subject, issuer string) KeylessIdentity {
	return KeylessIdentity{sigstore: s, subject: subject, issuer: issuer}
}

// Expired makes a keyless signature whose transparency log entry was integrated after the
// signing certificate's ten minutes.
func Expired() Option { return func(c *signConfig) { c.expired = true } }

func signKeyless(t testing.TB, at signTarget, id KeylessIdentity, opts ...Option) {
	t.Helper()
	repo, digest := at.repo, at.digest
	s, subject, issuer := id.sigstore, id.subject, id.issuer
	c := signConfig{over: digest, predType: cosignSignPredicate}
	for _, o := range opts {
		o(&c)
	}
	statement := statementJSON(t, repo, c)
	// The certificate is valid for ten minutes from now; its log entry must fall inside.
	signedAt := time.Now().Add(5 * time.Minute)
	if c.expired {
		signedAt = time.Now().Add(20 * time.Minute)
	}
	e, err := s.vs.AttestAtTime(subject, issuer, statement, signedAt, true)
	if err != nil {
		t.Fatalf("keyless signing %s@%s: %v", repo.Name(), digest, err)
	}
	vc, _ := e.VerificationContent()
	sc, _ := e.SignatureContent()
	entries, _ := e.TlogEntries()
	env := sc.EnvelopeContent().RawEnvelope()
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	pbEnv := &protodsse.Envelope{Payload: payload, PayloadType: env.PayloadType}
	for _, sig := range env.Signatures {
		raw, err := base64.StdEncoding.DecodeString(sig.Sig)
		if err != nil {
			t.Fatal(err)
		}
		pbEnv.Signatures = append(pbEnv.Signatures, &protodsse.Signature{Sig: raw, Keyid: sig.KeyID})
	}
	b := &protobundle.Bundle{
		MediaType: sigstoreBundleV03,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_Certificate{
				Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: pbEnv},
	}
	for _, entry := range entries {
		tle := entry.TransparencyLogEntry()
		// testing/ca leaves out the kind and version, which a bundle carries: they are the
		// canonicalized body's own.
		var kv struct {
			Kind       string `json:"kind"`
			APIVersion string `json:"apiVersion"`
		}
		if err := json.Unmarshal(tle.CanonicalizedBody, &kv); err != nil {
			t.Fatal(err)
		}
		tle.KindVersion = &protorekor.KindVersion{Kind: kv.Kind, Version: kv.APIVersion}
		// Nor the log's signed entry timestamp, which it makes again here.
		set, err := s.vs.RekorSignPayload(tlog.RekorPayload{Body: base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
			IntegratedTime: tle.IntegratedTime, LogIndex: tle.LogIndex, LogID: hex.EncodeToString(tle.LogId.KeyId)})
		if err != nil {
			t.Fatal(err)
		}
		tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
		b.VerificationMaterial.TlogEntries = append(b.VerificationMaterial.TlogEntries, tle)
	}
	bundleJSON, err := protojson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	attach(t, at, sigstoreBundleV03, static.NewLayer(bundleJSON, sigstoreBundleV03),
		map[string]string{bundleContentAnnot: "dsse-envelope", bundlePredicateAnnot: c.predType})
}

// statementJSON is the in-toto statement cosign v3 signs about c.over.
func statementJSON(t testing.TB, repo name.Repository, c signConfig) []byte {
	t.Helper()
	algo, hexDigest, _ := strings.Cut(c.over, ":")
	statement, err := json.Marshal(map[string]any{
		"_type":         inTotoStatementV1,
		"subject":       []any{map[string]any{"name": repo.Name(), "digest": map[string]string{algo: hexDigest}}},
		"predicateType": c.predType,
		"predicate":     map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return statement
}
