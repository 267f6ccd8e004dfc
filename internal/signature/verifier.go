package signature

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	sigsig "github.com/sigstore/sigstore/pkg/signature"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// ErrUnsupported is wrapped by the errors of New for a spec.verify this package cannot check: a
// provider other than cosign and notation, or cosign keyless verification without a secretRef
// in a process that was given no TUFRoot to fetch the Sigstore public-good trusted root with.
var ErrUnsupported = errors.New("unsupported verification")

// Media types and annotations that cosign writes.
const (
	// SimpleSigningMediaType is the media type of each layer of a legacy ".sig" manifest.
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// SignatureAnnotation holds the base64 signature of a legacy layer's payload.
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	// BundleMediaTypePrefix starts the artifact and layer media types of a Sigstore bundle
	// ("application/vnd.dev.sigstore.bundle.v0.3+json").
	BundleMediaTypePrefix = "application/vnd.dev.sigstore.bundle"
	// SignPredicateType is the in-toto predicate type of the statement cosign v3 signs for an
	// image; attestations carry other predicate types and sign nothing here.
	SignPredicateType = "https://sigstore.dev/cosign/sign/v1"
	// ociEmptyType is the config media type of artifacts without a config.
	ociEmptyType = "application/vnd.oci.empty.v1+json"
)

// Bounds on what one verification reads from a registry.
const (
	maxManifestBytes = 256 << 10
	maxLayers        = 16
	maxReferrers     = 16
	maxBundleBytes   = 256 << 10
)

// Verifier checks images against the trusted keys of one spec.verify. It is immutable and safe
// for concurrent use.
type Verifier struct {
	keys    []PublicKey
	bundles []*verify.Verifier
	// keyless verifies bundles whose certificate chains to the trusted root, against
	// identities; it is set instead of keys and bundles.
	keyless    *verify.Verifier
	identities []verify.CertificateIdentity
	// notation verifies Notation signatures; it is set instead of all the above.
	notation *notationState
	id       string
}

// TrustedRootKey is the Secret entry that holds a Sigstore trusted root (trusted_root.json, as
// `cosign trusted-root create` writes it) for keyless verification.
const TrustedRootKey = "trusted_root.json"

// maxTrustedRootBytes bounds the trusted root read from the Secret; the public-good one is
// about 10 kB.
const maxTrustedRootBytes = 512 << 10

// Option configures New.
type Option func(*options)

type options struct {
	tuf *TUFRoot
}

// WithTUFRoot has New verify the keyless signatures of a cosign spec.verify without a secretRef
// under the trusted root that r fetches, by default the Sigstore public-good one.
func WithTUFRoot(r *TUFRoot) Option { return func(o *options) { o.tuf = r } }

// New returns the Verifier of spec with the data of the Secret spec.secretRef names (nil when
// it names none). Its errors wrap ErrKeys (the Secret's keys or trusted root are unusable) or
// ErrUnsupported, or say what spec lacks; only an edit of the spec or the Secret cures any. The
// exception is a *TUFError, for a spec.verify without a secretRef whose trusted root could not
// be fetched: no verdict, a later attempt may succeed.
func New(spec *v1.OCIRepositoryVerification, secret map[string][]byte, opts ...Option) (*Verifier, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	switch spec.Provider {
	case v1.VerificationProviderCosign, "":
	case v1.VerificationProviderNotation:
		return newNotation(spec, secret)
	default:
		return nil, fmt.Errorf("%w: provider %q", ErrUnsupported, spec.Provider)
	}
	if spec.SecretRef == nil {
		return newPublicGood(spec, o.tuf)
	}
	if _, ok := secret[TrustedRootKey]; ok && !hasPublicKey(secret) {
		return newKeyless(spec, secret[TrustedRootKey])
	}
	keys, err := ParsePublicKeys(secret)
	if err != nil {
		return nil, err
	}
	v := &Verifier{keys: keys}
	id := sha256.New()
	fmt.Fprintf(id, "cosign-key\n")
	for _, k := range keys {
		fmt.Fprintf(id, "%s\n", k.Fingerprint)
		sv, err := sigsig.LoadDefaultVerifier(k.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrKeys, k.Name, err)
		}
		trusted := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) {
			// The bundle's key hint is the signer's to choose; every trusted key is tried.
			return root.NewExpiringKey(sv, time.Time{}, time.Time{}), nil
		})
		bv, err := verify.NewVerifier(trusted, verify.WithNoObserverTimestamps())
		if err != nil {
			return nil, err
		}
		v.bundles = append(v.bundles, bv)
	}
	v.id = hex.EncodeToString(id.Sum(nil))
	return v, nil
}

func hasPublicKey(secret map[string][]byte) bool {
	for name := range secret {
		if strings.HasSuffix(name, ".pub") {
			return true
		}
	}
	return false
}

// newKeyless returns the Verifier of keyless signatures under the trusted root rootJSON: the
// signing certificate chains to one of its certificate authorities, the transparency log
// entry verifies under one of its logs, and the certificate's identity matches one of spec's.
func newKeyless(spec *v1.OCIRepositoryVerification, rootJSON []byte) (*Verifier, error) {
	ids, err := keylessIdentities(spec)
	if err != nil {
		return nil, err
	}
	if len(rootJSON) > maxTrustedRootBytes {
		return nil, fmt.Errorf("%w: %q: %d bytes, more than %d", ErrKeys, TrustedRootKey, len(rootJSON), maxTrustedRootBytes)
	}
	tr, err := root.NewTrustedRootFromJSON(rootJSON)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: not a Sigstore trusted root: %s", ErrKeys, TrustedRootKey, truncate(err.Error(), 200))
	}
	return keylessVerifier(spec, ids, tr, sha256.Sum256(rootJSON), false)
}

// newPublicGood returns the Verifier of keyless signatures under the trusted root that r
// fetches through TUF, as newKeyless checks them, and, as cosign does by default, with a signed
// certificate timestamp from one of the root's certificate transparency logs embedded in the
// signing certificate when it lists any (the public-good root does). The identities are
// checked first, so that a spec that cannot work costs no request.
func newPublicGood(spec *v1.OCIRepositoryVerification, r *TUFRoot) (*Verifier, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: cosign keyless verification without a secretRef needs the Sigstore public-good trusted root, "+
			"which this process does not fetch; a Secret with a %s works", ErrUnsupported, TrustedRootKey)
	}
	ids, err := keylessIdentities(spec)
	if err != nil {
		return nil, err
	}
	tr, err := r.trusted()
	if err != nil {
		return nil, err
	}
	return keylessVerifier(spec, ids, tr.root, tr.sum, len(tr.root.CTLogs()) > 0)
}

// keylessIdentities returns the identities of spec.matchOIDCIdentity, of which there must be
// at least one.
func keylessIdentities(spec *v1.OCIRepositoryVerification) ([]verify.CertificateIdentity, error) {
	if len(spec.MatchOIDCIdentity) == 0 {
		// Any identity under the public-good root is anyone with an account at an OIDC
		// provider Fulcio trusts: no gate at all.
		return nil, errors.New("keyless verification needs at least one matchOIDCIdentity")
	}
	var ids []verify.CertificateIdentity
	for i, m := range spec.MatchOIDCIdentity {
		ci, err := verify.NewShortCertificateIdentity("", m.Issuer, "", m.Subject)
		if err != nil {
			return nil, fmt.Errorf("matchOIDCIdentity[%d]: %w", i, err)
		}
		ids = append(ids, ci)
	}
	return ids, nil
}

// keylessVerifier returns the keyless Verifier of ids under tr, whose bytes hash to sum: its ID
// changes with the trusted root, so that a rotated root is asked again about every digest. sct
// requires a signed certificate timestamp in the signing certificate.
func keylessVerifier(spec *v1.OCIRepositoryVerification, ids []verify.CertificateIdentity, tr root.TrustedMaterial,
	sum [sha256.Size]byte, sct bool) (*Verifier, error) {
	v := &Verifier{identities: ids}
	vopts := []verify.VerifierOption{verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1)}
	if sct {
		vopts = append(vopts, verify.WithSignedCertificateTimestamps(1))
	}
	var err error
	if v.keyless, err = verify.NewVerifier(tr, vopts...); err != nil {
		return nil, err
	}
	id := sha256.New()
	fmt.Fprintf(id, "cosign-keyless\n%x\n", sum)
	if sct {
		fmt.Fprintf(id, "sct\n")
	}
	for _, m := range spec.MatchOIDCIdentity {
		fmt.Fprintf(id, "%q %q\n", m.Issuer, m.Subject)
	}
	v.id = hex.EncodeToString(id.Sum(nil))
	return v, nil
}

// ID identifies what the Verifier trusts: two Verifiers with the same ID give the same verdict
// on the same digest, so verdicts may be remembered under it.
func (v *Verifier) ID() string { return v.id }

// Verify tells whether the manifest digest of repo carries a signature that verifies under a
// trusted key, looking first at the legacy ".sig" tag, then at the digest's referrers. When it
// does not, reason says why, for the policy's status. err is set when the registry could not be
// read, and then there is no verdict.
func (v *Verifier) Verify(ctx context.Context, repo name.Repository, digest string, opts ...remote.Option) (ok bool, reason string, err error) {
	h, err := ggcrv1.NewHash(digest)
	if err != nil || h.Algorithm != "sha256" {
		return false, fmt.Sprintf("digest %q is not a sha256 digest", digest), nil
	}
	opts = append(opts, remote.WithContext(ctx))
	if v.notation != nil {
		return v.verifyNotation(ctx, repo, h, opts)
	}
	var reasons []string
	ok, why, err := v.legacy(repo, h, opts)
	if err != nil || ok {
		return ok, "", err
	}
	reasons = append(reasons, why...)
	ok, why, err = v.referrers(repo, h, opts)
	if err != nil || ok {
		return ok, "", err
	}
	reasons = append(reasons, why...)
	if len(reasons) == 0 {
		return false, "not signed", nil
	}
	return false, strings.Join(dedupe(reasons), "; "), nil
}

// legacy checks the signatures of the "sha256-<hex>.sig" tag.
func (v *Verifier) legacy(repo name.Repository, h ggcrv1.Hash, opts []remote.Option) (bool, []string, error) {
	desc, err := remote.Get(repo.Tag(h.Algorithm+"-"+h.Hex+".sig"), opts...)
	if notFound(err) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("reading the signatures of %s@%s: %w", repo.Name(), h, err)
	}
	if len(desc.Manifest) > maxManifestBytes {
		return false, []string{"its signature manifest is too large"}, nil
	}
	m, err := ggcrv1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return false, []string{"its signature manifest does not parse"}, nil
	}
	var reasons []string
	for i, l := range m.Layers {
		if i == maxLayers {
			reasons = append(reasons, fmt.Sprintf("only the first %d of its %d signatures were checked", maxLayers, len(m.Layers)))
			break
		}
		if string(l.MediaType) != SimpleSigningMediaType {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[SignatureAnnotation])
		if err != nil || len(sig) == 0 {
			reasons = append(reasons, "a signature without a valid "+SignatureAnnotation+" annotation")
			continue
		}
		if l.Size > maxPayloadBytes {
			reasons = append(reasons, "a signature payload too large to read")
			continue
		}
		payload, err := readBlob(repo.Digest(l.Digest.String()), maxPayloadBytes, opts)
		if err != nil {
			return false, nil, fmt.Errorf("reading a signature payload of %s@%s: %w", repo.Name(), h, err)
		}
		if !v.verifyPayload(payload, sig) {
			reasons = append(reasons, "signed, but no signature verifies with the trusted keys")
			continue
		}
		signed, err := ImageDigestOf(payload)
		switch {
		case err != nil:
			reasons = append(reasons, "a signed payload that is not cosign's: "+err.Error())
		case signed != h.String():
			reasons = append(reasons, "the signature is over another digest, "+truncate(signed, 80))
		default:
			return true, nil, nil
		}
	}
	return false, reasons, nil
}

// verifyPayload tells whether sig is a signature of payload by one of the trusted keys, as
// cosign signs: ECDSA (ASN.1) and RSA (PKCS #1 v1.5) over SHA-256, Ed25519 over the payload.
func (v *Verifier) verifyPayload(payload, sig []byte) bool {
	sum := sha256.Sum256(payload)
	for _, k := range v.keys {
		switch key := k.Key.(type) {
		case *ecdsa.PublicKey:
			if ecdsa.VerifyASN1(key, sum[:], sig) {
				return true
			}
		case *rsa.PublicKey:
			if rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig) == nil {
				return true
			}
		case ed25519.PublicKey:
			if ed25519.Verify(key, payload, sig) {
				return true
			}
		}
	}
	return false
}

// referrers checks the Sigstore bundles among the digest's referrers.
func (v *Verifier) referrers(repo name.Repository, h ggcrv1.Hash, opts []remote.Option) (bool, []string, error) {
	listed, err := listReferrers(repo, h, opts)
	if err != nil {
		return false, nil, err
	}
	var reasons []string
	checked := 0
	for _, d := range listed {
		// Some registries (go-containerregistry's own) list the config's media type as the
		// artifact type, which is OCI's empty type for a bundle; the manifest tells.
		if !strings.HasPrefix(d.ArtifactType, BundleMediaTypePrefix) && d.ArtifactType != ociEmptyType && d.ArtifactType != "" {
			continue
		}
		if checked == maxReferrers {
			reasons = append(reasons, fmt.Sprintf("only the first %d of its signature bundles were checked", maxReferrers))
			break
		}
		checked++
		b, why, err := fetchBundle(repo, d, h, opts)
		if err != nil {
			return false, nil, err
		}
		if b == nil {
			if why != "" {
				reasons = append(reasons, why)
			}
			continue
		}
		if why = v.verifyBundle(b, h); why == "" {
			return true, nil, nil
		}
		reasons = append(reasons, why)
	}
	return false, reasons, nil
}

// listReferrers lists the referrers of the image h: through the referrers API, or on a registry
// without it, the index of the referrers tag schema (go-containerregistry falls back to it).
func listReferrers(repo name.Repository, h ggcrv1.Hash, opts []remote.Option) ([]ggcrv1.Descriptor, error) {
	idx, err := remote.Referrers(repo.Digest(h.String()), opts...)
	if err != nil {
		return nil, fmt.Errorf("listing the referrers of %s@%s: %w", repo.Name(), h, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("listing the referrers of %s@%s: %w", repo.Name(), h, err)
	}
	return im.Manifests, nil
}

// fetchReferrer reads the manifest of referrer d of the image h, which must name h as its
// subject; what names the kind of referrer in why, which says what is wrong with it.
func fetchReferrer(repo name.Repository, d ggcrv1.Descriptor, h ggcrv1.Hash, what string, opts []remote.Option) (*ggcrv1.Manifest, string, error) {
	if d.Size > maxManifestBytes {
		return nil, "a " + what + " manifest is too large", nil
	}
	desc, err := remote.Get(repo.Digest(d.Digest.String()), opts...)
	if notFound(err) {
		return nil, "a listed " + what + " is missing", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading a %s of %s@%s: %w", what, repo.Name(), h, err)
	}
	if len(desc.Manifest) > maxManifestBytes {
		return nil, "a " + what + " manifest is too large", nil
	}
	m, err := ggcrv1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, "a " + what + " manifest does not parse", nil
	}
	if m.Subject == nil || m.Subject.Digest != h {
		return nil, "a " + what + " that refers to another manifest", nil
	}
	return m, "", nil
}

// fetchBundle reads the bundle of referrer d of the image h; why says what is wrong with it.
func fetchBundle(repo name.Repository, d ggcrv1.Descriptor, h ggcrv1.Hash, opts []remote.Option) (*bundle.Bundle, string, error) {
	m, why, err := fetchReferrer(repo, d, h, "signature bundle", opts)
	if m == nil {
		return nil, why, err
	}
	for _, l := range m.Layers {
		if !strings.HasPrefix(string(l.MediaType), BundleMediaTypePrefix) {
			continue
		}
		if l.Size > maxBundleBytes {
			return nil, "a signature bundle too large to read", nil
		}
		data, err := readBlob(repo.Digest(l.Digest.String()), maxBundleBytes, opts)
		if err != nil {
			return nil, "", fmt.Errorf("reading a signature bundle of %s@%s: %w", repo.Name(), h, err)
		}
		var b bundle.Bundle
		if err := b.UnmarshalJSON(data); err != nil {
			return nil, "a signature bundle that does not parse: " + truncate(err.Error(), 200), nil
		}
		return &b, "", nil
	}
	// Another kind of artifact (an SBOM, a Notation signature) whose type the listing did
	// not tell.
	return nil, "", nil
}

// verifyBundle verifies b as a signature of the image h by a trusted key, and returns why not.
func (v *Verifier) verifyBundle(b *bundle.Bundle, h ggcrv1.Hash) string {
	if b.GetDsseEnvelope() == nil {
		return "a signature bundle without a DSSE envelope"
	}
	want, err := hex.DecodeString(h.Hex)
	if err != nil {
		return "an image digest that is not hex"
	}
	if v.keyless != nil {
		return v.verifyKeyless(b, want)
	}
	for _, bv := range v.bundles {
		// First the signature alone, so that a signature by a trusted key over another image
		// is told apart from one by another key.
		if _, err := bv.Verify(b, verify.NewPolicy(verify.WithoutArtifactUnsafe(), verify.WithKey())); err != nil {
			continue
		}
		if pt := predicateType(b.GetDsseEnvelope().GetPayload()); pt != SignPredicateType {
			return fmt.Sprintf("a signed statement of predicate type %q, not an image signature", truncate(pt, 80))
		}
		if _, err := bv.Verify(b, verify.NewPolicy(verify.WithArtifactDigest("sha256", want), verify.WithKey())); err != nil {
			return "the signature bundle is over another digest"
		}
		return ""
	}
	return "signed, but no signature bundle verifies with the trusted keys"
}

// verifyKeyless verifies b as a keyless signature of the image whose digest is want, and
// returns why not.
func (v *Verifier) verifyKeyless(b *bundle.Bundle, want []byte) string {
	// Each step alone, so that the reason tells which failed.
	res, err := v.keyless.Verify(b, verify.NewPolicy(verify.WithoutArtifactUnsafe(), verify.WithoutIdentitiesUnsafe()))
	if err != nil {
		return "no signature bundle verifies under the trusted root: " + truncate(err.Error(), 200)
	}
	if pt := predicateType(b.GetDsseEnvelope().GetPayload()); pt != SignPredicateType {
		return fmt.Sprintf("a signed statement of predicate type %q, not an image signature", truncate(pt, 80))
	}
	ids := []verify.PolicyOption{}
	for _, ci := range v.identities {
		ids = append(ids, verify.WithCertificateIdentity(ci))
	}
	if _, err := v.keyless.Verify(b, verify.NewPolicy(verify.WithoutArtifactUnsafe(), ids...)); err != nil {
		who := "an identity"
		if res != nil && res.Signature != nil && res.Signature.Certificate != nil {
			c := res.Signature.Certificate
			who = fmt.Sprintf("%s (issuer %s)", truncate(c.SubjectAlternativeName, 120), truncate(c.Issuer, 120))
		}
		return "signed by " + who + " that matchOIDCIdentity does not match"
	}
	if _, err := v.keyless.Verify(b, verify.NewPolicy(verify.WithArtifactDigest("sha256", want), ids...)); err != nil {
		return "the signature bundle is over another digest"
	}
	return ""
}

// readBlob reads the blob d, at most limit bytes; go-containerregistry checks its digest.
func readBlob(d name.Digest, limit int64, opts []remote.Option) ([]byte, error) {
	l, err := remote.Layer(d, opts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("blob %s is larger than %d bytes", d.DigestStr(), limit)
	}
	return b, nil
}

func notFound(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
