package reconcile

import (
	"errors"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// registryAnswers stands for the registry and the verifier of decisions taken without I/O: the
// digest of each tag, and the verdict on each digest ("" verifies, else why not). A lookup it
// holds no answer for fails the test.
type registryAnswers struct {
	t        testing.TB
	digests  map[string]string
	verdicts map[string]string
	// lookups counts the lookups answered.
	lookups int
}

// settle decides in as lookups.settle does, answering its lookups from r: the decision once it
// answers or asks for another view.
func (r *registryAnswers) settle(in decisionInput) decision {
	r.t.Helper()
	for range maxLookups + 1 {
		d := decide(in)
		if d.kind != decideNeeds {
			return d
		}
		r.lookups++
		switch d.need.kind {
		case lookupDigest:
			digest, ok := r.digests[d.need.tag]
			if !ok {
				r.t.Errorf("the digest of %q was asked for", d.need.tag)
				in.known.err = errors.New("no such tag")
				continue
			}
			in.known.digests[d.need.tag] = digest
		case lookupVerdict:
			why, ok := r.verdicts[d.need.digest]
			if !ok {
				r.t.Errorf("the verdict on %q (%s) was asked for", d.need.digest, d.need.tag)
				in.known.err = errors.New("no verdict")
				continue
			}
			in.known.verdicts[d.need.digest] = verdict{ok: why == "", reason: why}
		default:
			return d
		}
	}
	r.t.Fatalf("the decision of %s/%s asked for more than %d lookups", in.pol.Namespace, in.pol.Name, maxLookups)
	return decision{}
}

// applied is the result and the status of the policy that the writer leaves after d, a success,
// a failure or a refusal that the status does not already report.
func applied(d decision) (string, *v1.ImagePolicy) {
	out := d.pol.DeepCopy()
	switch d.kind {
	case decideSucceed:
		resolutionOf(d.pol, d.latest, d.inputs, d.skipped).apply(&out.Status)
		return PolicySucceeded, out
	case decideFail, decideRefuse:
		token := out.Annotations[v1.ReconcileRequestAnnotation]
		failedStatus{generation: out.Generation, request: token, reason: d.fail.reason, stalled: d.fail.stalled,
			message: failureMessage(d.fail.cause)}.apply(policyFields(out))
		if d.fail.stalled {
			return PolicyStalled, out
		}
		return PolicyFailed, out
	}
	return "", out
}
