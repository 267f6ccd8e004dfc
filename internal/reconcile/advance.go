package reconcile

import (
	"context"
	"errors"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/store"
)

// EvaluateChange evaluates the ImagePolicies of the repository whose tags c announces, as
// EvaluateRepository does. When c carries a delta signed with the store's key, a policy whose
// last evaluation read exactly the revision the delta starts from is advanced from its own
// status and the delta (Advance) without reading the tag store; every other policy is evaluated
// from the store. The images c names as Attached lose their remembered refusals, so that a
// policy that skipped one of them (which unchanged never finds unchanged) asks again.
func (e *Evaluator) EvaluateChange(ctx context.Context, c events.TagsChanged) ([]PolicyOutcome, error) {
	w := e.newPolicyWorld(ctx)
	if c.Delta != nil {
		w.delta = e.verifiedDelta(ctx, c)
	}
	if ds := c.AttachedDigests(); len(ds) > 0 {
		// A refusal of these images may be out of date: their verdicts are asked again.
		e.memo.forgetRefused(ds)
	}
	return e.evaluateRepository(ctx, w, c.Namespace, c.Name)
}

// verifiedDelta returns c's delta as an Addition when its proof verifies under the store's key,
// read again once when it does not (the directory may have been replaced since), and nil
// otherwise.
func (e *Evaluator) verifiedDelta(ctx context.Context, c events.TagsChanged) *delta {
	var err error
	for _, fresh := range []bool{false, true} {
		var key []byte
		if key, err = e.Store.ProofKey(fresh); err != nil {
			continue
		}
		var d *events.TagsDelta
		if d, err = c.Verified(key); err == nil {
			return newDelta(c.Revision, d)
		}
	}
	logger(e.Log).WarnContext(ctx, "delta not applied; reading the tag store", "namespace", c.Namespace, "name", c.Name, "why", err)
	return nil
}

// delta is a verified addition to a stored tag list.
type delta struct {
	id       store.Identity
	from, to string
	tags     []string
	digests  map[string]string
}

func newDelta(to string, d *events.TagsDelta) *delta {
	out := &delta{id: store.Identity{UID: d.UID, Image: d.Image, Listing: d.Listing}, from: d.From, to: to,
		digests: make(map[string]string, len(d.Added))}
	for _, a := range d.Added {
		out.tags = append(out.tags, a.Tag)
		out.digests[a.Tag] = a.Digest
	}
	return out
}

// advanceable tells whether pol, as read, may be advanced by d, a delta of the repository's
// identity, for a repository of image: its last successful evaluation was of its current generation and read exactly the
// revision d starts from, of the same identity, and no reconcile request waits.
func advanceable(pol *v1.ImagePolicy, token string, d *delta, image string) bool {
	st := &pol.Status
	if st.LatestRef == nil || st.LatestRef.Name != image ||
		st.ObservedGeneration != pol.Generation || token != "" && token != st.LastHandledReconcileAt ||
		!apimeta.IsStatusConditionTrue(st.Conditions, v1.ReadyCondition) {
		return false
	}
	ev := apimeta.FindStatusCondition(st.Conditions, v1.TagsEvaluatedCondition)
	return ev != nil && ev.Status == metav1.ConditionTrue && ev.ObservedGeneration == pol.Generation &&
		st.ObservedTagsRevision != "" && st.ObservedTagsRevision == d.from
}

// Advance returns the latest image of a policy whose latest image over a tag list is latest,
// once tags are added to that list: every rule is a maximum under a total order, so the latest of
// the longer list is the better of latest and the best of the added tags. digests are the added
// tags' digests. ok is false when the answer needs the registry or the whole list: a digest the
// policy reflects Always that is due again because latest stays, an added tag without its
// digest, or added tags the rule cannot order (a numerical tag that is not a number), whose
// failure a full evaluation reports, or a latest tag outside the distribution spec's grammar,
// which a version before the grammar was enforced may have selected and the store no longer
// returns.
func Advance(sel *policy.Selector, reflect v1.ReflectionPolicy, latest v1.ImageRef, tags []string, digests map[string]string) (v1.ImageRef, bool) {
	if !imagename.ValidTag(latest.Tag) {
		return v1.ImageRef{}, false
	}
	tag, err := sel.Latest(append([]string{latest.Tag}, tags...))
	if err != nil {
		return v1.ImageRef{}, false
	}
	if tag == latest.Tag {
		return latest, reflect != v1.ReflectAlways
	}
	out := v1.ImageRef{Name: latest.Name, Tag: tag}
	if reflect == v1.ReflectNever {
		return out, true
	}
	out.Digest = digests[tag]
	return out, out.Digest != ""
}

// errStatusMoved is the error of a status write whose object's status records another evaluated
// revision than the one the outcome started from: another evaluation wrote in between, and this
// outcome may be older than it.
var errStatusMoved = errors.New("the status records another tag revision since it was read; the outcome is not written")

// evaluatedRevision is the tag revision pol's status records as evaluated ("" when it records
// none: never evaluated, last written by another controller or an older reflector, or the field
// pruned by a CRD without it).
func evaluatedRevision(pol *v1.ImagePolicy) string {
	return pol.Status.ObservedTagsRevision
}
