package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/registry"
)

// UnverifiedTTL is how long a verdict that a digest carries no valid signature is remembered:
// an image is often signed a moment after it is pushed, so a refusal is asked again after a
// while, where a valid signature stays valid under the same keys.
const UnverifiedTTL = time.Minute

// MaxVerifiedCandidates bounds the tags whose signatures one evaluation of a policy with
// spec.verify checks, best first.
const MaxVerifiedCandidates = 10

// ImageVerifier checks the signatures of images for one spec.verify and its trusted keys.
type ImageVerifier interface {
	// ID identifies what the verifier trusts: the same ID gives the same verdict on a digest.
	ID() string
	// Verify tells whether the manifest digest of repo carries a valid signature, and if not
	// why; err means the registry could not be read, and there is no verdict.
	Verify(ctx context.Context, repo name.Repository, digest string, opts ...remote.Option) (ok bool, reason string, err error)
}

// NewImageVerifier returns the ImageVerifier of spec, given the data of the Secret its
// secretRef names (nil when it names none). Its errors are about the spec or the Secret's key
// material, which only an edit cures, and must not quote key material; except those with a
// method Transient() bool that answers true: trust material that the verifier fetches (the
// Sigstore public-good trusted root, through TUF) could not be had now, and a later evaluation
// may succeed.
type NewImageVerifier func(spec *v1.OCIRepositoryVerification, secret map[string][]byte) (ImageVerifier, error)

// transient is implemented by the errors of a NewImageVerifier that a retry may cure.
type transient interface{ Transient() bool }

func isTransient(err error) bool {
	var t transient
	return errors.As(err, &t) && t.Transient()
}

// verifyMemo remembers what verifications learnt: the digest of a tag in one stored tag list,
// and the verdict on a digest under one verifier, so that evaluating an unchanged repository
// again costs no registry request. Both are bounded; when full they start again.
type verifyMemo struct {
	mu       sync.Mutex
	digests  map[memoTag]string
	verdicts map[memoVerdict]verdict
}

type memoTag struct{ key, revision, tag string }

// memoVerdict identifies a verdict: the verifier, the digest, and the referrer tags of that
// digest in the stored list (policy.IsReferrerTag), so that a signature that arrives as a tag,
// such as the referrers tag schema's index of a registry without the referrers API, is looked
// at as soon as a scan lists it.
type memoVerdict struct{ verifier, digest, referrers string }

type verdict struct {
	ok     bool
	reason string
	at     time.Time
}

// maxMemo bounds each of verifyMemo's maps.
const maxMemo = 4096

func (m *verifyMemo) digest(k memoTag) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.digests[k]
	return d, ok
}

func (m *verifyMemo) putDigest(k memoTag, d string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.digests == nil || len(m.digests) >= maxMemo {
		m.digests = map[memoTag]string{}
	}
	m.digests[k] = d
}

func (m *verifyMemo) verdict(k memoVerdict, now time.Time) (verdict, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.verdicts[k]
	if ok && !v.ok && now.Sub(v.at) >= UnverifiedTTL {
		return verdict{}, false
	}
	return v, ok
}

// validFor tells whether a valid signature of digest under verifier is remembered.
func (m *verifyMemo) validFor(verifier, digest string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.verdicts {
		if v.ok && k.verifier == verifier && k.digest == digest {
			return true
		}
	}
	return false
}

// forgetRefused forgets the verdicts that digests carry no valid signature, under any verifier.
func (m *verifyMemo) forgetRefused(digests []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.verdicts {
		if !v.ok && slices.Contains(digests, k.digest) {
			delete(m.verdicts, k)
		}
	}
}

func (m *verifyMemo) putVerdict(k memoVerdict, v verdict) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.verdicts == nil || len(m.verdicts) >= maxMemo {
		m.verdicts = map[memoVerdict]verdict{}
	}
	m.verdicts[k] = v
}

// skippedTag is a candidate better than the one selected whose signature did not verify.
type skippedTag struct{ tag, reason string }

// skippedNote starts the note of a Ready message that names the better tags an evaluation
// skipped (describeSkipped).
const skippedNote = "skipped newer tags whose signature does not verify: "

// skippedUnverified tells whether the Ready condition of conds is True and the evaluation that
// made it so skipped tags because their signatures did not verify (TagsEvaluated's reason
// SkippedUnverified, written with Ready): they may be signed later, so the policy is evaluated
// again (PolicyDue's DueUnverified, and unchanged never holds).
func skippedUnverified(conds []metav1.Condition) bool {
	ev := apimeta.FindStatusCondition(conds, v1.TagsEvaluatedCondition)
	return apimeta.IsStatusConditionTrue(conds, v1.ReadyCondition) && ev != nil && ev.Reason == v1.SkippedUnverifiedReason
}

// skippedNoteOf is the note of a Ready message that names the tags in skipped, if any.
func skippedNoteOf(skipped []skippedTag) string {
	if len(skipped) == 0 {
		return ""
	}
	return skippedNote + describeSkipped(skipped)
}

func describeSkipped(skipped []skippedTag) string {
	parts := make([]string, len(skipped))
	for i, s := range skipped {
		parts[i] = fmt.Sprintf("%s (%s)", s.tag, s.reason)
	}
	return strings.Join(parts, ", ")
}

// errVerifyConfig marks the errors of verifierOf that only an edit of the spec or the Secret
// cures.
var errVerifyConfig = errors.New("spec.verify")

// verifierOf returns the ImageVerifier of pol's spec.verify, reading its Secret.
func (e *Evaluator) verifierOf(ctx context.Context, pol *v1.ImagePolicy) (ImageVerifier, error) {
	if e.Verifier == nil {
		return nil, errors.New("spec.verify: this process does not verify signatures; the policy function does")
	}
	spec := pol.Spec.Verify
	var data map[string][]byte
	if ref := spec.SecretRef; ref != nil {
		sec, err := e.Kube.Secrets.Get(ctx, pol.Namespace, ref.Name)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("spec.verify.secretRef: Secret %s/%s not found", pol.Namespace, ref.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("spec.verify.secretRef: reading Secret %s/%s: %w", pol.Namespace, ref.Name, err)
		}
		data = sec.Data
	}
	iv, err := e.Verifier(spec, data)
	if isTransient(err) {
		// No verdict: the policy keeps its latestRef and is evaluated again.
		return nil, fmt.Errorf("spec.verify: %w", err)
	}
	if err != nil {
		if spec.SecretRef != nil {
			return nil, fmt.Errorf("%w: Secret %s/%s: %w", errVerifyConfig, pol.Namespace, spec.SecretRef.Name, err)
		}
		return nil, fmt.Errorf("%w: %w", errVerifyConfig, err)
	}
	return iv, nil
}

// lazyScan is a registry session for repo, prepared on its first use.
type lazyScan struct {
	e    *Evaluator
	repo *v1.ImageRepository
	scan *registry.Scan
}

func (l *lazyScan) get(ctx context.Context) (*registry.Scan, error) {
	if l.scan != nil {
		return l.scan, nil
	}
	var err error
	l.scan, err = l.e.Registry.Prepare(ctx, l.e.Kube, l.repo)
	return l.scan, err
}

func (l *lazyScan) close() {
	if l.scan != nil {
		l.scan.Close()
	}
}

// verdictOn returns iv's verdict on digest, the manifest of the repository's tag, from memory or
// else from the registry through l; referrers are the referrer tags of digest in the tag list it
// was found in. err means the registry could not be read, and there is no verdict.
func (l *lazyScan) verdictOn(ctx context.Context, iv ImageVerifier, tag, digest, referrers string) (verdict, error) {
	e, sc, repo := l.e, l, l.repo
	vk := memoVerdict{verifier: iv.ID(), digest: digest, referrers: referrers}
	if v, ok := e.memo.verdict(vk, clock(e.Now)()); ok {
		return v, nil
	}
	scan, err := sc.get(ctx)
	if err != nil {
		return verdict{}, err
	}
	opts, cancel := scan.Remote(ctx)
	defer cancel()
	var v verdict
	v.ok, v.reason, err = iv.Verify(ctx, scan.Repository(), digest, opts...)
	v.at = clock(e.Now)()
	if err != nil {
		return verdict{}, fmt.Errorf("verifying the signature of %s:%s: %w", repo.Spec.Image, tag, err)
	}
	e.memo.putVerdict(vk, v)
	return v, nil
}

// referrerTags returns, for each digest's hex that referrer tags of tags name, those tags
// joined in their (sorted) order.
func referrerTags(tags []string) map[string]string {
	out := map[string]string{}
	for _, tag := range tags {
		if policy.IsReferrerTag(tag) {
			hex := tag[len("sha256-") : len("sha256-")+64]
			if out[hex] != "" {
				out[hex] += ","
			}
			out[hex] += tag
		}
	}
	return out
}

// verifiedDigest is the digest latestRef gets under the policy's digestReflectionPolicy, given
// the digest whose signature was verified.
func verifiedDigest(pol *v1.ImagePolicy, latest *v1.ImageRef, verified string) string {
	switch pol.GetDigestReflectionPolicy() {
	case v1.ReflectNever:
		return ""
	case v1.ReflectIfNotPresent:
		if old := pol.Status.LatestRef; old != nil && old.Name == latest.Name && old.Tag == latest.Tag && old.Digest != "" {
			return old.Digest
		}
	}
	return verified
}
