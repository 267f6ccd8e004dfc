package reconcile

import (
	"fmt"
	"slices"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
)

// decisionKind is what a decision tells the writer to do with a policy.
type decisionKind int

const (
	// decideSucceed: write latestRef, Ready=True and TagsEvaluated (resolution).
	decideSucceed decisionKind = iota + 1
	// decideFail: write Ready=False with the failure, latestRef kept (statusWriter.fail).
	decideFail
	// decideRefuse: as decideFail with reason AccessDenied, unless the status already reports
	// the same refusal (repeatsRefusal).
	decideRefuse
	// decideSuspend: record the reconcile request only (statusWriter.acknowledge).
	decideSuspend
	// decideFinalize: remove Flux's finalizer of a policy being deleted.
	decideFinalize
	// decideUnchanged: nothing the answer depends on changed since this process wrote it.
	decideUnchanged
	// decideNeeds: no answer yet; the lookup named by the decision's need comes first.
	decideNeeds
)

// lookupKind is a read that a decision needs before it can answer.
type lookupKind int

const (
	// lookupDigest: the manifest digest of need.tag, as the registry answers a HEAD (or, unless
	// need.fresh, as remembered for the tag list).
	lookupDigest lookupKind = iota + 1
	// lookupVerdict: the verifier's verdict on need.digest, the manifest of need.tag.
	lookupVerdict
	// lookupPolicy: the policy as read may not be advanced by the delta; a fresher read of it
	// may be.
	lookupPolicy
	// lookupStoredList: the delta view cannot answer; the stored tag list can.
	lookupStoredList
)

// lookup is the read a decision asks for.
type lookup struct {
	kind   lookupKind
	tag    string
	digest string
	// fresh: the digest must come from the registry, not from memory (digestReflectionPolicy
	// Always, or a policy without spec.verify, which remembers no digest).
	fresh bool
}

// decision is a policy's answer: what to write, or the lookup it still needs. decide makes the
// answers over a tag view; Evaluator.decidePolicy, which gathers decide's inputs, makes the
// refusals and the failures found before a view can be had. Evaluator.apply writes it.
type decision struct {
	kind decisionKind
	pol  *v1.ImagePolicy
	// latest, skipped and inputs are a success's: the latest image, the better candidates whose
	// signatures did not verify, and what the outcome depends on.
	latest  *v1.ImageRef
	skipped []skippedTag
	inputs  policyInputs
	// digest is the manifest digest whose signature verified, for a policy with spec.verify.
	digest string
	// checked is how many candidates a policy with spec.verify had checked.
	checked int
	// fail is a failure's or a refusal's.
	fail failure
	// why is what a refusal hides from the status, for the log.
	why string
	// retry is the evaluator's own failure to return once the failure is written, so that the
	// request is delivered again.
	retry error
	// need is the lookup of decideNeeds.
	need lookup
}

// failed is the decision of a failure f of pol.
func failed(pol *v1.ImagePolicy, f failure) decision {
	return decision{kind: decideFail, pol: pol, fail: f}
}

// refused is the refusal of pol's reference to the repository of another namespace.
func refused(pol *v1.ImagePolicy, stalled bool, why string, cause error) decision {
	return decision{kind: decideRefuse, pol: pol, why: why, fail: failure{v1.AccessDeniedReason, stalled, cause}}
}

// needs is the decision that asks for l first.
func needs(pol *v1.ImagePolicy, l lookup) decision {
	return decision{kind: decideNeeds, pol: pol, need: l}
}

// tagView is the tags a decision selects from: the stored list of the repository (stored), or,
// for a push, the policy's own latestRef plus the push's verified delta (added). Exactly one is
// set. The ranking of the stored list is kept once made: a decision repeated with more lookups
// answered ranks it once.
type tagView struct {
	stored *store.Entry
	added  *delta

	ranked  []string
	rankErr error
	rankOK  bool
	refs    map[string]string
}

func storedView(entry *store.Entry) *tagView { return &tagView{stored: entry} }

func deltaView(d *delta) *tagView { return &tagView{added: d} }

// revision is the tag revision the view stands for.
func (v *tagView) revision() string {
	if v.stored != nil {
		return v.stored.Revision
	}
	return v.added.to
}

// candidates are the best MaxVerifiedCandidates of the stored list under sel.
func (v *tagView) candidates(sel *policy.Selector) ([]string, error) {
	if !v.rankOK {
		v.ranked, v.rankErr = sel.Ranked(v.stored.Tags, MaxVerifiedCandidates)
		v.rankOK = true
	}
	return v.ranked, v.rankErr
}

// referrers are the referrer tags of the view's tags, by the digest's hex they name
// (referrerTags): the stored list's, or the delta's added tags'.
func (v *tagView) referrers() map[string]string {
	if v.refs == nil {
		if v.stored != nil {
			v.refs = referrerTags(v.stored.Tags)
		} else {
			v.refs = referrerTags(v.added.tags)
		}
	}
	return v.refs
}

// knowledge is what the lookups of one decision learnt: the digests of tags of the view's list,
// the verdicts on digests under the policy's verifier, and the error of the lookup that failed,
// if one did.
type knowledge struct {
	digests  map[string]string
	verdicts map[string]verdict
	err      error
}

// newKnowledge is knowing nothing yet; its maps are made by the first lookup that learns, so
// that a decision without lookups, the common one, costs none.
func newKnowledge() *knowledge { return &knowledge{} }

// learnDigest records that tag's digest is digest.
func (k *knowledge) learnDigest(tag, digest string) {
	if k.digests == nil {
		k.digests = map[string]string{}
	}
	k.digests[tag] = digest
}

// learnVerdict records the verdict v on digest.
func (k *knowledge) learnVerdict(digest string, v verdict) {
	if k.verdicts == nil {
		k.verdicts = map[string]verdict{}
	}
	k.verdicts[digest] = v
}

// decisionInput is what a policy's answer is a function of.
type decisionInput struct {
	// pol is the policy as read; token the reconcile request its annotations carry.
	pol   *v1.ImagePolicy
	token string
	// repo is the ImageRepository it refers to, and sel the selector of its spec.
	repo *v1.ImageRepository
	sel  *policy.Selector
	// verifier is the ID of the verifier of its spec.verify, "" without.
	verifier string
	// view is the tags to select from; known what the lookups of this decision learnt so far.
	view  *tagView
	known *knowledge
}

// decide is a policy's answer over a tag view: the latest image and what else a success writes,
// the failure, or the lookup that must come first. Its two views give the same answer where
// both answer: the delta view asks for the stored list where it cannot (FuzzAdvance).
func decide(in decisionInput) decision {
	switch {
	case in.view.added != nil && in.verifier != "":
		return in.advanceVerified()
	case in.view.added != nil:
		return in.advance()
	case in.verifier != "":
		return in.selectVerified()
	}
	return in.selectLatest()
}

// succeeded is the success of in with latest, the candidates skipped and the digest verified.
func (in decisionInput) succeeded(latest *v1.ImageRef, skipped []skippedTag, digest string) decision {
	return decision{kind: decideSucceed, pol: in.pol, latest: latest, skipped: skipped, digest: digest,
		inputs: policyInputs{uid: string(in.pol.UID), generation: in.pol.Generation, request: in.token,
			revision: in.view.revision(), image: in.repo.Spec.Image, verifier: in.verifier}}
}

// selectLatest is the answer of a policy without spec.verify from the stored list: the latest
// tag, with the digest its digestReflectionPolicy reflects.
func (in decisionInput) selectLatest() decision {
	latest, bad := latestOf(in.sel, in.repo, in.view.stored.Tags)
	if bad != nil {
		return failed(in.pol, *bad)
	}
	digest, ask := knownDigest(in.pol, latest)
	if ask {
		if in.known.err != nil {
			err := in.known.err
			return failed(in.pol, failure{registry.Reason(err), registry.Stalled(err),
				fmt.Errorf("failed fetching digest of %s: %w", latest.String(), err)})
		}
		var ok bool
		if digest, ok = in.known.digests[latest.Tag]; !ok {
			return needs(in.pol, lookup{kind: lookupDigest, tag: latest.Tag, fresh: true})
		}
	}
	latest.Digest = digest
	return in.succeeded(latest, nil, "")
}

// selectVerified is the answer of a policy with spec.verify from the stored list: the best of
// at most MaxVerifiedCandidates, best first, whose digest carries a valid signature, with the
// better ones skipped; when none verifies, a failure that keeps latestRef.
func (in decisionInput) selectVerified() decision {
	cands, err := in.view.candidates(in.sel)
	if err != nil {
		f, _ := verifiedFailure("", 0, nil, err)
		return failed(in.pol, f)
	}
	// A digest that the registry may have moved since is never taken from memory.
	fresh := in.pol.GetDigestReflectionPolicy() == v1.ReflectAlways
	var skipped []skippedTag
	for i, tag := range cands {
		digest, ok := in.known.digests[tag]
		var v verdict
		if ok {
			v, ok = in.known.verdicts[digest]
		}
		if !ok {
			if in.known.err != nil {
				f, _ := verifiedFailure("", i+1, skipped, in.known.err)
				return failed(in.pol, f)
			}
			if digest == "" {
				return needs(in.pol, lookup{kind: lookupDigest, tag: tag, fresh: fresh})
			}
			return needs(in.pol, lookup{kind: lookupVerdict, tag: tag, digest: digest})
		}
		if v.ok {
			latest := &v1.ImageRef{Name: in.repo.Spec.Image, Tag: tag}
			latest.Digest = verifiedDigest(in.pol, latest, digest)
			d := in.succeeded(latest, skipped, digest)
			d.checked = i + 1
			return d
		}
		skipped = append(skipped, skippedTag{tag: tag, reason: v.reason})
	}
	f, _ := verifiedFailure("", len(cands), skipped, nil)
	d := failed(in.pol, f)
	d.checked = len(cands)
	return d
}

// advance is the answer of a policy without spec.verify from its latestRef and a push's delta:
// every rule is a maximum under a total order, so the latest of the longer list is the better
// of latestRef and the best of the added tags (Advance).
func (in decisionInput) advance() decision {
	d := in.view.added
	if !advanceable(in.pol, in.token, d, in.repo.Spec.Image) {
		return needs(in.pol, lookup{kind: lookupPolicy})
	}
	latest, ok := Advance(in.sel, in.pol.GetDigestReflectionPolicy(), *in.pol.Status.LatestRef, d.tags, d.digests)
	if !ok {
		return needs(in.pol, lookup{kind: lookupStoredList})
	}
	return in.succeeded(&latest, nil, "")
}

// advanceVerified is advance for a policy with spec.verify: its answer equals selectVerified's
// over the longer list. It holds only when the last evaluation selected the best candidate of
// its list (it skipped none), so that the candidates better than latestRef are the added tags
// that rank above it; when at most MaxVerifiedCandidates-1 of them do, so that latestRef is
// among the candidates selectVerified checks; when latestRef's digest is known with a valid
// signature (in.known, from this process's memory); and when every added tag above latestRef
// comes with its digest. The added tags are checked best first: the first that verifies becomes
// latest, and those before it are skipped; when none verifies, latestRef stays, with them all
// skipped. Otherwise, and when a verdict could not be had, the stored list answers.
func (in decisionInput) advanceVerified() decision {
	d, pol := in.view.added, in.pol
	if !advanceable(pol, in.token, d, in.repo.Spec.Image) {
		return needs(pol, lookup{kind: lookupPolicy})
	}
	toStore := needs(pol, lookup{kind: lookupStoredList})
	old := *pol.Status.LatestRef
	if pol.GetDigestReflectionPolicy() == v1.ReflectAlways || skippedUnverified(pol.Status.Conditions) ||
		!imagename.ValidTag(old.Tag) {
		return toStore
	}
	oldDigest, known := in.known.digests[old.Tag]
	if !known || !in.known.verdicts[oldDigest].ok {
		return toStore
	}
	cands, err := in.sel.Ranked(append([]string{old.Tag}, d.tags...), MaxVerifiedCandidates)
	if err != nil {
		return toStore
	}
	above := slices.Index(cands, old.Tag)
	if above < 0 {
		return toStore
	}
	var skipped []skippedTag
	for _, tag := range cands[:above] {
		digest := d.digests[tag]
		if digest == "" {
			return toStore
		}
		v, ok := in.known.verdicts[digest]
		if !ok {
			if in.known.err != nil {
				return toStore
			}
			return needs(pol, lookup{kind: lookupVerdict, tag: tag, digest: digest})
		}
		if v.ok {
			latest := &v1.ImageRef{Name: old.Name, Tag: tag}
			latest.Digest = verifiedDigest(pol, latest, digest)
			return in.succeeded(latest, skipped, digest)
		}
		skipped = append(skipped, skippedTag{tag: tag, reason: v.reason})
	}
	return in.succeeded(&old, skipped, oldDigest)
}
