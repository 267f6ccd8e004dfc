package signature

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/notaryproject/notation-core-go/revocation"
	"github.com/notaryproject/notation-core-go/revocation/crl"
	"github.com/notaryproject/notation-core-go/revocation/purpose"
	"github.com/notaryproject/notation-go"
	nverifier "github.com/notaryproject/notation-go/verifier"
	"github.com/notaryproject/notation-go/verifier/trustpolicy"
	"github.com/notaryproject/notation-go/verifier/truststore"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/egress"
)

// Names and media types of Notation signatures.
const (
	// NotationArtifactType is the artifact type (the config media type) of the manifest of a
	// Notation signature, an OCI 1.1 referrer of the signed manifest.
	NotationArtifactType = "application/vnd.cncf.notary.signature"
	// TrustPolicyKey is the Secret entry that holds the Notation trust policy document.
	TrustPolicyKey = "trustpolicy.json"

	mediaTypeJWS  = "application/jose+json"
	mediaTypeCOSE = "application/cose"
)

// Bounds on what a Notation verification reads, from the Secret and from a registry.
const (
	// maxTrustPolicyBytes bounds trustpolicy.json; a document of a few statements is under 2 kB.
	maxTrustPolicyBytes = 64 << 10
	// maxCertEntryBytes bounds each .crt or .pem entry; a bundle of the ~150 roots of a
	// system store is about 200 kB.
	maxCertEntryBytes = 512 << 10
	// maxCertificates bounds the trust store's certificates, over all entries.
	maxCertificates = 512
	// maxEnvelopeBytes bounds a signature envelope; one with a chain of three certificates and
	// a timestamp is under 16 kB.
	maxEnvelopeBytes = 256 << 10
)

// notationState is what a Verifier of provider notation holds.
type notationState struct {
	verifier notation.Verifier
	policy   *trustpolicy.Document
}

// newNotation returns the Verifier of Notation signatures under the trust policy and the trust
// store of a Secret's data, as Flux's notation provider reads them: the trust policy document
// from trustpolicy.json, the trust store's certificates from every entry whose name ends in
// .crt or .pem.
func newNotation(spec *v1.OCIRepositoryVerification, secret map[string][]byte) (*Verifier, error) {
	if spec.SecretRef == nil {
		return nil, fmt.Errorf("%w: provider notation needs a secretRef to a Secret with %s and the trust store's certificates (.crt or .pem)", ErrKeys, TrustPolicyKey)
	}
	doc, err := parseTrustPolicy(secret)
	if err != nil {
		return nil, err
	}
	certs, err := parseTrustStore(secret)
	if err != nil {
		return nil, err
	}
	opts, err := revocationOptions()
	if err != nil {
		return nil, err
	}
	nv, err := nverifier.NewWithOptions(doc, trustStore(certs), nil, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %s", ErrKeys, TrustPolicyKey, truncate(err.Error(), 200))
	}
	id := sha256.New()
	fmt.Fprintf(id, "notation\n%x\n", sha256.Sum256(secret[TrustPolicyKey]))
	for _, c := range certs {
		fmt.Fprintf(id, "%x\n", sha256.Sum256(c.Raw))
	}
	return &Verifier{notation: &notationState{verifier: nv, policy: doc}, id: hex.EncodeToString(id.Sum(nil))}, nil
}

// parseTrustPolicy reads the trust policy document of the Secret's data. Its errors wrap ErrKeys
// and say what is wrong in notation's words (about scopes, stores and identities, no key
// material), bounded.
func parseTrustPolicy(data map[string][]byte) (*trustpolicy.Document, error) {
	b, ok := data[TrustPolicyKey]
	if !ok {
		return nil, fmt.Errorf("%w: the Secret has no %s (a Notation trust policy document)", ErrKeys, TrustPolicyKey)
	}
	if len(b) > maxTrustPolicyBytes {
		return nil, fmt.Errorf("%w: %q: %d bytes, more than %d", ErrKeys, TrustPolicyKey, len(b), maxTrustPolicyBytes)
	}
	var doc trustpolicy.Document
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %q: not a JSON trust policy document: %s", ErrKeys, TrustPolicyKey, jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: %q: data after the JSON document", ErrKeys, TrustPolicyKey)
	}
	if err := doc.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %q: %s", ErrKeys, TrustPolicyKey, truncate(err.Error(), 300))
	}
	return &doc, nil
}

// jsonProblem describes a decoding error of encoding/json by its kind and offset, without the
// text it read.
func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("a syntax error at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q has a JSON %s, not a %s", truncate(typ.Field, 80), typ.Value, typ.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends early"
	}
	return "it does not decode"
}

// parseTrustStore reads the trust store's certificates from the Secret's entries whose names end
// in .crt or .pem, in the order of their names: each holds one or more PEM CERTIFICATE blocks, or
// DER certificates. Each must be a CA certificate or a self-signed signing certificate, as
// Notation requires of a trust store. Errors wrap ErrKeys, name the entry and never quote it.
func parseTrustStore(data map[string][]byte) ([]*x509.Certificate, error) {
	var names []string
	for name := range data {
		if strings.HasSuffix(name, ".crt") || strings.HasSuffix(name, ".pem") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: the Secret has no certificate (an entry whose name ends in .crt or .pem)", ErrKeys)
	}
	slices.Sort(names)
	var certs []*x509.Certificate
	for _, name := range names {
		cs, err := parseCertificates(data[name], maxCertificates-len(certs))
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrKeys, name, err)
		}
		if err := truststore.ValidateCertificates(cs); err != nil {
			return nil, fmt.Errorf("%w: %q: %s", ErrKeys, name, truncate(err.Error(), 200))
		}
		certs = append(certs, cs...)
	}
	return certs, nil
}

// parseCertificates parses one entry of at most room certificates. Its errors describe the
// entry's shape without quoting it.
func parseCertificates(b []byte, room int) ([]*x509.Certificate, error) {
	if len(b) > maxCertEntryBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", len(b), maxCertEntryBytes)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty")
	}
	var certs []*x509.Certificate
	rest := b
	for i := 0; ; i++ {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = r
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is of type %q, not CERTIFICATE", i+1, truncate(block.Type, 40))
		}
		if len(certs) == room {
			return nil, fmt.Errorf("more than %d certificates in the trust store", maxCertificates)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d is not an X.509 certificate", i+1)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		// Notation's own trust store also reads DER files.
		cs, err := x509.ParseCertificates(b)
		if err != nil || len(cs) == 0 {
			return nil, errors.New("neither PEM CERTIFICATE blocks nor DER certificates")
		}
		if len(cs) > room {
			return nil, fmt.Errorf("more than %d certificates in the trust store", maxCertificates)
		}
		return cs, nil
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("data after the last PEM block that is not PEM")
	}
	return certs, nil
}

// Bounds on the revocation checks of a trust policy that enforces them: notation-go fetches the
// OCSP responses and CRLs that the signing and timestamping certificates name.
const (
	// maxRevocationBytes bounds each OCSP response and CRL; notation-go's own bound on a CRL,
	// 32 MiB, is the whole memory limit of the policy function.
	maxRevocationBytes = 4 << 20
	revocationTimeout  = 5 * time.Second
)

// revocationOptions returns notation-go's revocation validators with HTTP clients whose
// responses are bounded by maxRevocationBytes.
func revocationOptions() (nverifier.VerifierOptions, error) {
	// The certificates name the OCSP and CRL addresses, and whoever signs may choose them: they
	// pass the egress guard as registry connections do.
	guard := egress.Default()
	next := guard.RoundTripper(guard.Transport(http.DefaultTransport.(*http.Transport)))
	client := &http.Client{Timeout: revocationTimeout, Transport: boundedTransport{next, maxRevocationBytes}}
	crls, err := crl.NewHTTPFetcher(client)
	if err != nil {
		return nverifier.VerifierOptions{}, err
	}
	var out nverifier.VerifierOptions
	for p, v := range map[purpose.Purpose]*revocation.Validator{purpose.CodeSigning: &out.RevocationCodeSigningValidator, purpose.Timestamping: &out.RevocationTimestampingValidator} {
		if *v, err = revocation.NewWithOptions(revocation.Options{OCSPHTTPClient: client, CRLFetcher: crls, CertChainPurpose: p}); err != nil {
			return nverifier.VerifierOptions{}, err
		}
	}
	return out, nil
}

// boundedTransport fails the read of a response body past limit bytes.
type boundedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: t.limit}
	return resp, nil
}

type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, errors.New("response larger than the bound on revocation data")
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// trustStore is the Secret's certificates as Notation's X.509 trust store: every named store of
// every type that a trust policy statement names holds all of them, as with Flux, where the
// Secret is the trust store.
type trustStore []*x509.Certificate

func (s trustStore) GetCertificates(context.Context, truststore.Type, string) ([]*x509.Certificate, error) {
	return slices.Clone(s), nil
}

// notationReference is the reference of the digest h of repo as Notation names artifacts and
// as registryScopes match them: host/repository@sha256:..., Docker Hub as docker.io.
func notationReference(repo name.Repository, h ggcrv1.Hash) string {
	host := repo.RegistryStr()
	if host == name.DefaultRegistry {
		host = "docker.io"
	}
	return host + "/" + repo.RepositoryStr() + "@" + h.String()
}

// verifyNotation checks the Notation signatures among the referrers of the image h.
func (v *Verifier) verifyNotation(ctx context.Context, repo name.Repository, h ggcrv1.Hash, opts []remote.Option) (bool, string, error) {
	ref := notationReference(repo, h)
	statement, err := v.notation.policy.GetApplicableTrustPolicy(ref)
	if err != nil {
		return false, fmt.Sprintf("no statement of %s has a registryScope that covers %s", TrustPolicyKey, truncate(strings.TrimSuffix(ref, "@"+h.String()), 200)), nil
	}
	if level, err := statement.SignatureVerification.GetVerificationLevel(); err == nil && level.Name == trustpolicy.LevelSkip.Name {
		// The trust policy says not to verify this repository's signatures, as `notation
		// verify` accepts it.
		return true, "", nil
	}
	listed, err := listReferrers(repo, h, opts)
	if err != nil {
		return false, "", err
	}
	var reasons []string
	var target *ocispec.Descriptor
	checked := 0
	for _, d := range listed {
		// go-containerregistry's registry and its referrers tag schema list a manifest
		// without artifactType under its config's media type, which Notation sets.
		if d.ArtifactType != NotationArtifactType && d.ArtifactType != "" {
			continue
		}
		if checked == maxReferrers {
			reasons = append(reasons, fmt.Sprintf("only the first %d of its Notation signatures were checked", maxReferrers))
			break
		}
		checked++
		m, why, err := fetchReferrer(repo, d, h, "Notation signature", opts)
		if err != nil {
			return false, "", err
		}
		if m == nil {
			reasons = append(reasons, why)
			continue
		}
		if m.ArtifactType != NotationArtifactType && string(m.Config.MediaType) != NotationArtifactType {
			continue
		}
		if len(m.Layers) != 1 {
			reasons = append(reasons, fmt.Sprintf("a Notation signature manifest of %d layers, not one envelope", len(m.Layers)))
			continue
		}
		env := m.Layers[0]
		if mt := string(env.MediaType); mt != mediaTypeJWS && mt != mediaTypeCOSE {
			reasons = append(reasons, fmt.Sprintf("a Notation signature envelope of media type %q, neither %s nor %s", truncate(mt, 80), mediaTypeJWS, mediaTypeCOSE))
			continue
		}
		if env.Size > maxEnvelopeBytes {
			reasons = append(reasons, "a Notation signature envelope too large to read")
			continue
		}
		if target == nil {
			// The descriptor Notation signs is the manifest's as the registry serves it.
			desc, err := remote.Head(repo.Digest(h.String()), opts...)
			if err != nil {
				return false, "", fmt.Errorf("reading the manifest descriptor of %s@%s: %w", repo.Name(), h, err)
			}
			target = &ocispec.Descriptor{MediaType: string(desc.MediaType), Digest: digest.Digest(desc.Digest.String()), Size: desc.Size}
		}
		blob, err := readBlob(repo.Digest(env.Digest.String()), maxEnvelopeBytes, opts)
		if err != nil {
			return false, "", fmt.Errorf("reading a Notation signature of %s@%s: %w", repo.Name(), h, err)
		}
		outcome, err := v.notation.verifier.Verify(ctx, *target, blob, notation.VerifierVerifyOptions{
			ArtifactReference: ref, SignatureMediaType: string(env.MediaType)})
		if err == nil {
			return true, "", nil
		}
		reasons = append(reasons, notationReason(outcome, err, h))
	}
	if len(reasons) == 0 {
		return false, "not signed", nil
	}
	return false, strings.Join(dedupe(reasons), "; "), nil
}

// notationReason says why a signature did not verify: the first check of the trust policy's
// verification level that failed and is enforced, else a signed payload about another manifest.
func notationReason(outcome *notation.VerificationOutcome, err error, h ggcrv1.Hash) string {
	if outcome != nil {
		for _, r := range outcome.VerificationResults {
			if r == nil || r.Error == nil || r.Action != trustpolicy.ActionEnforce {
				continue
			}
			detail := truncate(r.Error.Error(), 200)
			switch r.Type {
			case trustpolicy.TypeIntegrity:
				return "a Notation signature envelope that does not verify (tampered or malformed): " + detail
			case trustpolicy.TypeAuthenticity:
				return "signed, but not by a certificate the trust policy trusts: " + detail
			case trustpolicy.TypeAuthenticTimestamp:
				return "the signing certificate has expired or is not yet valid: " + detail
			case trustpolicy.TypeExpiry:
				return "the Notation signature has expired: " + detail
			case trustpolicy.TypeRevocation:
				return "the signing certificate is revoked, or its revocation could not be checked: " + detail
			}
			return "a Notation signature that does not verify: " + detail
		}
		if outcome.EnvelopeContent != nil {
			var payload struct {
				TargetArtifact ocispec.Descriptor `json:"targetArtifact"`
			}
			if json.Unmarshal(outcome.EnvelopeContent.Payload.Content, &payload) == nil && payload.TargetArtifact.Digest.String() != h.String() {
				return "the Notation signature is over another digest, " + truncate(payload.TargetArtifact.Digest.String(), 80)
			}
		}
	}
	return "a Notation signature that does not verify: " + truncate(err.Error(), 200)
}
