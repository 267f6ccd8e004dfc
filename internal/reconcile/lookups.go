package reconcile

import (
	"context"
	"strings"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// maxLookups bounds the lookups of one decision: a digest and a verdict for each candidate a
// policy with spec.verify checks, and one digest for a policy without.
const maxLookups = 2*MaxVerifiedCandidates + 1

// lookups performs what the decisions of one policy ask for (decision.need): digests and
// verdicts, from this process's memory where it may answer (verifyMemo), else from the
// registry, through one session prepared on the first question memory cannot answer, so that an
// unchanged repository costs no request at all, not even a ping.
type lookups struct {
	e    *Evaluator
	repo *v1.ImageRepository
	// iv is the verifier of the policy's spec.verify, nil without; only a policy with it
	// remembers digests.
	iv ImageVerifier
	// key is the repository's store key; delta the push's verified delta of its identity, if
	// any.
	key   string
	delta *delta
	sc    *lazyScan
}

func (l *lookups) close() {
	if l.sc != nil {
		l.sc.close()
	}
}

func (l *lookups) scan() *lazyScan {
	if l.sc == nil {
		l.sc = &lazyScan{e: l.e, repo: l.repo}
	}
	return l.sc
}

// settle decides in, performing each digest and verdict lookup the decision asks for and
// deciding again with what it learnt, until the decision answers or asks for another view.
func (l *lookups) settle(ctx context.Context, in decisionInput) decision {
	for range maxLookups + 1 {
		d := decide(in)
		if d.kind != decideNeeds {
			return d
		}
		switch d.need.kind {
		case lookupDigest:
			digest, err := l.digest(ctx, in.view, d.need)
			if err != nil {
				in.known.err = err
			} else {
				in.known.learnDigest(d.need.tag, digest)
			}
		case lookupVerdict:
			refs := in.view.referrers()[strings.TrimPrefix(d.need.digest, "sha256:")]
			v, err := l.scan().verdictOn(ctx, l.iv, d.need.tag, d.need.digest, refs)
			if err != nil {
				in.known.err = err
			} else {
				in.known.learnVerdict(d.need.digest, v)
			}
		default:
			return d
		}
	}
	return decide(in)
}

// digest looks the digest of need.tag up in the stored list of view. A policy with spec.verify
// takes it from memory unless need.fresh: as remembered for the list's revision, or, when the
// push's delta produced that revision, as the delta carries it or as remembered for the
// revision the delta started from; else, and for a policy without spec.verify, the registry
// answers a HEAD.
func (l *lookups) digest(ctx context.Context, view *tagView, need lookup) (string, error) {
	var tk memoTag
	if l.iv != nil {
		tk = memoTag{key: l.key, revision: view.revision(), tag: need.tag}
		if digest, ok := l.e.memo.digest(tk); ok && !need.fresh {
			return digest, nil
		}
		if d := l.delta; d != nil && d.to == tk.revision && !need.fresh {
			digest := d.digests[need.tag]
			if digest == "" {
				digest, _ = l.e.memo.digest(memoTag{key: l.key, revision: d.from, tag: need.tag})
			}
			if digest != "" {
				l.e.memo.putDigest(tk, digest)
				return digest, nil
			}
		}
	}
	scan, err := l.scan().get(ctx)
	if err != nil {
		return "", err
	}
	digest, err := scan.Head(ctx, need.tag)
	if err != nil {
		return "", err
	}
	if l.iv != nil {
		l.e.memo.putDigest(tk, digest)
	}
	return digest, nil
}

// knownOnPush is what memory tells a decision of pol over the push's delta: the digest of its
// latestRef in the revision the delta starts from, and that its signature verifies under the
// policy's verifier, when both are remembered.
func (l *lookups) knownOnPush(pol *v1.ImagePolicy) *knowledge {
	k := newKnowledge()
	if l.iv == nil || pol.Status.LatestRef == nil {
		return k
	}
	tag := pol.Status.LatestRef.Tag
	digest, ok := l.e.memo.digest(memoTag{key: l.key, revision: l.delta.from, tag: tag})
	if ok && l.e.memo.validFor(l.iv.ID(), digest) {
		k.learnDigest(tag, digest)
		k.learnVerdict(digest, verdict{ok: true})
	}
	return k
}

// rememberOnPush remembers the digests of the revision that the push's delta produced as far as
// the next delta needs them: its added tags' and latest's, whose signature is known to verify.
func (l *lookups) rememberOnPush(latest, digest string) {
	d := l.delta
	for tag, dg := range d.digests {
		if dg != "" {
			l.e.memo.putDigest(memoTag{key: l.key, revision: d.to, tag: tag}, dg)
		}
	}
	l.e.memo.putDigest(memoTag{key: l.key, revision: d.to, tag: latest}, digest)
}
