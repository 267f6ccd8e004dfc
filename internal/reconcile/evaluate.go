package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
)

// Results of an evaluation, as PolicyOutcome.Result reports them.
const (
	// PolicySucceeded: the latest image was selected and written (Ready=True).
	PolicySucceeded = "succeeded"
	// PolicyUnchanged: nothing the result depends on changed since the last successful
	// evaluation in this process, so nothing was read or written.
	PolicyUnchanged = "unchanged"
	// PolicySuspended: spec.suspend is set; nothing was written but the reconcile request.
	PolicySuspended = "suspended"
	// PolicyNotFound: the ImagePolicy does not exist (any more).
	PolicyNotFound = "not found"
	// PolicyFailed: Ready=False with a reason that a later evaluation may clear.
	PolicyFailed = "failed"
	// PolicyStalled: Ready=False and Stalled=True; only a spec change helps.
	PolicyStalled = "stalled"
	// PolicyDeleting: the ImagePolicy is being deleted; nothing was evaluated, and Flux's
	// finalizer, if it held it, was removed.
	PolicyDeleting = "deleting"
)

// PolicyOutcome describes what one evaluation of an ImagePolicy did.
type PolicyOutcome struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Result is one of the Policy* results.
	Result string `json:"result"`
	// Latest is status.latestRef after the evaluation.
	Latest *v1.ImageRef `json:"latest,omitempty"`
	// Changed tells that this evaluation changed latestRef; Previous is the ref it replaced.
	Changed  bool         `json:"changed,omitempty"`
	Previous *v1.ImageRef `json:"previous,omitempty"`
	// Reason and Message are those of the Ready condition of a failed evaluation.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Duration is how long the evaluation took.
	Duration time.Duration `json:"duration"`
	// Finalized tells that the evaluation removed Flux's finalizer from a policy being deleted.
	Finalized bool `json:"finalized,omitempty"`

	// suspended and deleting describe the policy as read, for the reconcile metric.
	suspended, deleting bool
	// read is the stored tag list the outcome was derived from, when it was read.
	read *storeRead
}

// Defaults of an Evaluator whose fields are zero.
const (
	// DefaultStoreWait bounds the wait for a tag store that another process holds, when the
	// caller's context allows longer.
	DefaultStoreWait = 30 * time.Second
	// DefaultEvaluateConcurrency is how many policies of one repository are evaluated at once.
	DefaultEvaluateConcurrency = 8
)

// Evaluator evaluates ImagePolicies: it reads the referenced repository's tags from the tag
// store, selects the latest by the policy and writes the status as Flux's
// image-reflector-controller does. It is the work of the policy function. One Evaluator serves a
// whole process and is safe for concurrent use.
//
// It remembers, in memory, what each successful evaluation depended on (policy generation,
// reconcile request, tag revision, image name) and skips an evaluation when none of it changed.
// A restarted process has forgotten and simply evaluates again, which is harmless: an evaluation
// whose result did not change writes nothing.
type Evaluator struct {
	Kube *kube.Client
	// Store is the tag store, opened read-only.
	Store *store.Store
	// Registry resolves digests for digestReflectionPolicy IfNotPresent and Always.
	Registry *registry.Client
	// Sink receives a LatestChanged event whenever an evaluation changes a latestRef; nil sends
	// none.
	Sink Dispatcher
	// Recorder receives Kubernetes Events; nil records none.
	Recorder *kube.Recorder
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Log receives one line per evaluation; nil means slog.Default().
	Log *slog.Logger
	// StoreWait bounds the wait for the tag store; zero means DefaultStoreWait.
	StoreWait time.Duration
	// Concurrency bounds the evaluations EvaluateRepository runs at once; zero means
	// DefaultEvaluateConcurrency.
	Concurrency int
	// PageSize is the limit of each list call of EvaluateRepository; zero means
	// kube.DefaultPageSize.
	PageSize int64
	// Verifier builds the signature checks of policies with spec.verify; nil fails them.
	Verifier NewImageVerifier
	// Policies holds the watched copies in which the ImagePolicies of a repository are found
	// without a list call; on a miss (not synced yet, no policy of the repository held, or
	// unset) they are listed consistently (watchedPolicies, listPolicies).
	Policies CachedPolicies
	// Repositories, when set, holds the watched copies of the ImageRepositories, from which a
	// policy of a repository's own namespace is advanced by a delta of the identity its copy
	// shows, without a consistent read of the repository (policyWorld.fromCopy).
	Repositories CachedRepositories
	// NoCrossNamespaceRefs refuses every ImagePolicy whose imageRepositoryRef names another
	// namespace, whatever that repository's accessFrom says, as Flux's
	// --no-cross-namespace-refs does: Ready=False and Stalled=True with reason AccessDenied.
	NoCrossNamespaceRefs bool

	mu   sync.Mutex
	done map[string]policyInputs
	memo verifyMemo
}

// policyInputs is what a successful evaluation depended on.
type policyInputs struct {
	uid        string
	generation int64
	request    string
	revision   string
	image      string
	// verifier is the ID of the policy's ImageVerifier, if it has spec.verify: a change of
	// the trusted keys is a change of the result.
	verifier string
}

// Evaluate evaluates the ImagePolicy namespace/name. The outcome of the policy (success or a
// failure that its status now reports) is in the PolicyOutcome; the error is about the
// evaluator's own work (the API server or the tag store unreachable), after which the request
// should be delivered again.
func (e *Evaluator) Evaluate(ctx context.Context, namespace, name string) (PolicyOutcome, error) {
	start := clock(e.Now)()
	pol, err := e.Kube.Policies.Get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		e.forget(namespace, name)
		out := PolicyOutcome{Namespace: namespace, Name: name, Result: PolicyNotFound}
		return e.logged(ctx, out, start, nil)
	}
	if err != nil {
		out := PolicyOutcome{Namespace: namespace, Name: name, Result: PolicyFailed}
		return e.logged(ctx, out, start, fmt.Errorf("reading ImagePolicy %s/%s: %w", namespace, name, err))
	}
	// A policy without an outcome of its current spec may have been created a moment ago: a scan
	// that stores tags after this evaluation read them (or found none, or no repository)
	// announces them to the policies the watched copies hold, which it may not be among yet
	// (watchedPolicies). When the repository's stored revision has moved by the time the status
	// is written, the outcome is derived again, once, from what is stored now. A policy the
	// copies already held is evaluated by the scan's event.
	unseen := pol.Status.ObservedGeneration != pol.Generation
	w := e.newPolicyWorld(ctx)
	out, err := e.evaluate(ctx, w, pol)
	if err == nil && unseen && e.Policies != nil && w.storeMoved(out.read) {
		if pol, err = e.Kube.Policies.Get(ctx, namespace, name); err == nil {
			out, err = e.evaluate(ctx, w.again(), pol)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
	}
	return e.logged(ctx, out, start, err)
}

// logged finishes an outcome with its duration, records it in the reconcile metric and logs it.
func (e *Evaluator) logged(ctx context.Context, out PolicyOutcome, start time.Time, err error) (PolicyOutcome, error) {
	out.Duration = clock(e.Now)().Sub(start)
	if out.Result == "" {
		// Only the evaluator's own failures return before deciding a result.
		out.Result = PolicyFailed
	}
	if out.Result != PolicyNotFound {
		metrics.RecordReconcile(metrics.Reconcile{Kind: metrics.KindImagePolicy, Namespace: out.Namespace,
			Name: out.Name, Suspended: out.suspended, Deleting: out.deleting, Took: out.Duration})
	}
	attrs := []any{"namespace", out.Namespace, "name", out.Name, "outcome", out.Result,
		"duration", out.Duration}
	if out.Latest != nil {
		attrs = append(attrs, "latest", out.Latest.Tag)
		if out.Latest.Digest != "" {
			attrs = append(attrs, "digest", out.Latest.Digest)
		}
	}
	if out.Changed {
		attrs = append(attrs, "changed", true)
	}
	if out.Finalized {
		attrs = append(attrs, "finalizer_removed", v1.ImageFinalizer)
	}
	if out.Reason != "" {
		attrs = append(attrs, "reason", out.Reason, "message", out.Message)
	}
	if st, ok := stepsAttr(ctx); ok {
		attrs = append(attrs, st)
	}
	if err != nil {
		// The error goes on to callers that log it and answer with it.
		err = redact.Error(err)
		logger(e.Log).ErrorContext(ctx, "evaluated ImagePolicy", append(attrs, "error", err)...)
	} else {
		logger(e.Log).InfoContext(ctx, "evaluated ImagePolicy", attrs...)
	}
	return out, err
}

// evaluate evaluates pol, as read from the API server, against the world w: it decides
// (decidePolicy) and writes the decision (apply).
func (e *Evaluator) evaluate(ctx context.Context, w *policyWorld, pol *v1.ImagePolicy) (PolicyOutcome, error) {
	d, read, err := e.decidePolicy(ctx, w, pol)
	if err != nil {
		return PolicyOutcome{Namespace: pol.Namespace, Name: pol.Name, Latest: pol.Status.LatestRef,
			suspended: pol.Spec.Suspend, deleting: !pol.DeletionTimestamp.IsZero()}, err
	}
	out, err := e.apply(ctx, d)
	out.suspended, out.deleting = pol.Spec.Suspend, !pol.DeletionTimestamp.IsZero()
	if read != nil {
		return read.of(out, err)
	}
	return out, err
}

// decidePolicy gathers what pol's answer depends on, in the order Flux's controller reads it,
// and returns the decision: a refusal or a failure as soon as one is certain, else decide's
// answer over the push's delta, when it has one for the policy, or over the stored tag list,
// with the lookups it asks for performed. read is the stored list the decision was derived
// from, when it was read; the error is the evaluator's own (the apiserver unreachable).
func (e *Evaluator) decidePolicy(ctx context.Context, w *policyWorld, pol *v1.ImagePolicy) (d decision, read *storeRead, err error) {
	switch {
	case !pol.DeletionTimestamp.IsZero():
		return decision{kind: decideFinalize, pol: pol}, nil, nil
	case pol.Spec.Suspend:
		return decision{kind: decideSuspend, pol: pol}, nil, nil
	}
	repoNS, repoName := pol.RepositoryNamespace(), pol.Spec.ImageRepositoryRef.Name
	if blocked := blockedReference(pol, e.NoCrossNamespaceRefs); blocked != nil {
		// Refused before anything of the other namespace is read, as Flux does; only a spec
		// change cures it.
		return refused(pol, true, "cross-namespace references are blocked", blocked), nil, nil
	}
	key := StoreKey(repoNS, repoName)
	// An outcome of a repository that does not exist yet, or of tags not stored yet, is marked
	// as read from nothing, so that Evaluate can tell when they have appeared since.
	nothing := &storeRead{key: key, noRepository: true}
	repo, err := w.repositoryFor(ctx, pol, repoNS, repoName)
	switch {
	case apierrors.IsNotFound(err) && repoNS != pol.Namespace:
		return refused(pol, false, "the ImageRepository does not exist", crossNamespaceDenied(pol, repoNS, repoName)), nothing, nil
	case apierrors.IsNotFound(err):
		return failed(pol, repositoryMissing(repoNS, repoName)), nothing, nil
	case err != nil:
		return decision{}, nil, fmt.Errorf("reading ImageRepository %s/%s: %w", repoNS, repoName, err)
	}
	markStep(ctx, "repository")
	if denied, err := w.accessDenied(ctx, pol, repo); err != nil {
		return decision{}, nil, err
	} else if denied != nil {
		return refused(pol, false, denied.Error(), crossNamespaceDenied(pol, repoNS, repoName)), nil, nil
	}
	id, sel, bad := specOf(pol, repo)
	if bad != nil {
		return failed(pol, *bad), nil, nil
	}
	// The request acted upon is the one present now; a later one is handled by a later call.
	token, _ := kube.ReconcileRequest(pol.Annotations)
	in := decisionInput{pol: pol, token: token, repo: repo, sel: sel}
	var iv ImageVerifier
	if pol.Spec.Verify != nil {
		if iv, err = e.verifierOf(ctx, pol); err != nil {
			return failed(pol, failure{v1.VerificationErrorReason, errors.Is(err, errVerifyConfig), err}), nil, nil
		}
		in.verifier = iv.ID()
	}
	lk := &lookups{e: e, repo: repo, iv: iv, key: key}
	defer lk.close()
	if dl := w.delta; dl != nil && dl.id == id {
		lk.delta = dl
		if d, ok := e.decideOnPush(ctx, in, lk); ok {
			markStep(ctx, "advanced")
			return d, nil, nil
		}
	}
	rev, err := w.revision(key, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return failed(pol, noTagsFailure(repo, err)), &storeRead{key: key, id: id}, nil
	case err != nil:
		return storeUnreadable(pol, err), nil, nil
	}
	read = &storeRead{key: key, id: id, revision: rev}
	inputs := policyInputs{uid: string(pol.UID), generation: pol.Generation, request: token,
		revision: rev, image: repo.Spec.Image, verifier: in.verifier}
	if e.unchanged(pol, inputs) {
		return decision{kind: decideUnchanged, pol: pol}, read, nil
	}
	entry, err := w.entry(key, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return failed(pol, noTagsFailure(repo, err)), nil, nil
	case err != nil:
		return storeUnreadable(pol, err), nil, nil
	case len(entry.Tags) == 0:
		return failed(pol, noTagsFailure(repo, nil)), nil, nil
	}
	read.revision = entry.Revision
	markStep(ctx, "tags")
	in.view, in.known = storedView(&entry), newKnowledge()
	return lk.settle(ctx, in), read, nil
}

// decideOnPush is the decision of in's policy over its latestRef and the push's delta (lk.delta),
// with the lookups it asks for performed; ok is false when the stored list must decide instead.
// The policies come from the watched copies, which may not hold the latest status yet, such as that of the evaluation of the previous push a moment ago: when the delta
// may not advance the policy as listed, it is read once more, which costs less than a read of the
// store.
func (e *Evaluator) decideOnPush(ctx context.Context, in decisionInput, lk *lookups) (decision, bool) {
	in.view = deltaView(lk.delta)
	in.known = lk.knownOnPush(in.pol)
	d := lk.settle(ctx, in)
	if d.kind == decideNeeds && d.need.kind == lookupPolicy {
		fresh, err := e.Kube.Policies.Get(ctx, in.pol.Namespace, in.pol.Name)
		markStep(ctx, "reread")
		if err != nil || fresh.ResourceVersion == in.pol.ResourceVersion || fresh.Generation != in.pol.Generation {
			return decision{}, false
		}
		in.pol = fresh
		in.token, _ = kube.ReconcileRequest(fresh.Annotations)
		in.known = lk.knownOnPush(fresh)
		d = lk.settle(ctx, in)
	}
	if d.kind != decideSucceed {
		return decision{}, false
	}
	if in.verifier != "" {
		lk.rememberOnPush(d.latest.Tag, d.digest)
	}
	return d, true
}

// apply writes the decision d: one status write, or none, per outcome.
func (e *Evaluator) apply(ctx context.Context, d decision) (PolicyOutcome, error) {
	pol := d.pol
	out := PolicyOutcome{Namespace: pol.Namespace, Name: pol.Name, Latest: pol.Status.LatestRef}
	switch d.kind {
	case decideFinalize:
		return e.finalize(ctx, pol, out)
	case decideSuspend:
		out.Result = PolicySuspended
		// As Flux does, a suspended object acknowledges a reconcile request without acting on it.
		return out, e.status().acknowledge(ctx, pol)
	case decideUnchanged:
		out.Result = PolicyUnchanged
		return out, nil
	case decideSucceed:
		return e.succeed(ctx, pol, d.latest, d.inputs, d.skipped)
	case decideRefuse:
		return e.refuse(ctx, pol, d.fail.stalled, d.why, d.fail.cause)
	case decideFail:
		out, err := e.fail(ctx, pol, d.fail.reason, d.fail.stalled, d.fail.cause)
		if d.retry != nil {
			err = errors.Join(d.retry, err)
		}
		return out, err
	}
	return out, fmt.Errorf("ImagePolicy %s/%s: no answer decided (%d)", pol.Namespace, pol.Name, d.kind)
}

// repositoryMissing is the failure of a policy whose ImageRepository repoNS/repoName, in its
// own namespace, does not exist: retried, since creating it cures it.
func repositoryMissing(repoNS, repoName string) failure {
	return failure{v1.DependencyNotReadyReason, false, fmt.Errorf(
		"failed to get the referred ImageRepository: referenced %s %s/%s does not exist",
		v1.ImageRepositoryKind, repoNS, repoName)}
}

// specOf checks what an evaluation needs of pol's spec and of its ImageRepository repo before
// it reads tags: the repository's identity, under which its tags are stored, and the policy's
// selector. Either failing stalls the policy: only a spec edit cures it.
func specOf(pol *v1.ImagePolicy, repo *v1.ImageRepository) (store.Identity, *policy.Selector, *failure) {
	// Only tags listed for the repository as it is now may be used: after a recreation or an
	// edit whose scan has not succeeded yet, the stored ones belong to another image or list.
	id, err := RepositoryIdentity(repo)
	if err != nil {
		return store.Identity{}, nil, &failure{v1.ImageURLInvalidReason, true, err}
	}
	sel, err := policy.NewSelector(pol.Spec)
	if err != nil {
		return store.Identity{}, nil, &failure{v1.InvalidPolicyReason, true, err}
	}
	return id, sel, nil
}

// latestOf is the answer of a policy without spec.verify, whose selector is sel, from the tags
// stored for its ImageRepository repo: the latest image, without its digest, or the failure.
func latestOf(sel *policy.Selector, repo *v1.ImageRepository, tags []string) (*v1.ImageRef, *failure) {
	if len(tags) == 0 {
		f := noTagsFailure(repo, nil)
		return nil, &f
	}
	tag, err := sel.Latest(tags)
	if err != nil {
		// No candidate, or a numerical tag that does not parse: Flux's "Failure".
		return nil, &failure{v1.FailureReason, false, err}
	}
	return &v1.ImageRef{Name: repo.Spec.Image, Tag: tag}, nil
}

// storeRead is the stored tag list an outcome was derived from: its key, identity and revision;
// an empty revision when nothing was stored for the identity, and noRepository (the identity
// unknown) when the repository did not exist.
type storeRead struct {
	key          string
	id           store.Identity
	revision     string
	noRepository bool
}

// of returns out, marked as derived from r, and err.
func (r storeRead) of(out PolicyOutcome, err error) (PolicyOutcome, error) {
	out.read = &r
	return out, err
}

// failure is how an evaluation fails: Ready=False with reason, Stalled when stalled, and cause
// to report.
type failure struct {
	reason  string
	stalled bool
	cause   error
}

// verifiedFailure is how a selection among verified tags fails that selected tag (empty: none)
// after checking checked candidates and skipping skipped, and ended in err; failed is false when
// it succeeded.
func verifiedFailure(tag string, checked int, skipped []skippedTag, err error) (f failure, failed bool) {
	switch {
	case errors.As(err, new(*registry.Error)):
		return failure{registry.Reason(err), registry.Stalled(err), err}, true
	case err != nil && (errors.Is(err, policy.ErrNoCandidates) || tag == "" && checked == 0):
		return failure{v1.FailureReason, false, err}, true
	case err != nil:
		// The verifier could not read the registry: a retry may get a verdict.
		return failure{v1.ReadOperationFailedReason, false, err}, true
	case tag == "":
		return failure{v1.VerificationErrorReason, false, fmt.Errorf(
			"no signature verifies for any of the %d best tags, so latestRef is kept: %s", checked, describeSkipped(skipped))}, true
	}
	return failure{}, false
}

// finalize lets a policy being deleted go, suspended or not: Flux's finalizer, which reflector
// never adds but finds on objects that Flux's controller reconciled, is removed so that the
// deletion completes. Other finalizers are left to their owners.
func (e *Evaluator) finalize(ctx context.Context, pol *v1.ImagePolicy, out PolicyOutcome) (PolicyOutcome, error) {
	out.Result = PolicyDeleting
	e.forget(pol.Namespace, pol.Name)
	wctx, cancel := writeContext(ctx)
	defer cancel()
	removed, err := e.Kube.Policies.RemoveFinalizer(wctx, pol, v1.ImageFinalizer)
	if err != nil {
		return out, fmt.Errorf("removing the finalizer %s of ImagePolicy %s/%s: %w", v1.ImageFinalizer, pol.Namespace, pol.Name, err)
	}
	out.Finalized = removed
	return out, nil
}

// knownDigest is the digest that latestRef gets under pol's digestReflectionPolicy without
// asking the registry, or ask when only the registry knows it: none for Never; the current one
// for IfNotPresent when latest is the same image and tag and already has one; else ask.
func knownDigest(pol *v1.ImagePolicy, latest *v1.ImageRef) (digest string, ask bool) {
	switch pol.GetDigestReflectionPolicy() {
	case v1.ReflectNever:
		return "", false
	case v1.ReflectIfNotPresent:
		if old := pol.Status.LatestRef; old != nil && old.Name == latest.Name && old.Tag == latest.Tag && old.Digest != "" {
			return old.Digest, false
		}
	}
	return "", true
}

// succeed writes a successful evaluation from inputs: latestRef (and observedPreviousRef when
// it changes), the reconcile request handled, Ready=True with Flux's message, followed by a note
// that names the better tags skipped for their signatures, if any (a note that is new is also a
// Warning Event), and TagsEvaluated with the revision read and whether tags were skipped.
func (e *Evaluator) succeed(ctx context.Context, pol *v1.ImagePolicy, latest *v1.ImageRef, inputs policyInputs, skipped []skippedTag) (PolicyOutcome, error) {
	res := resolutionOf(pol, latest, inputs, skipped)
	note := res.note
	out := PolicyOutcome{Namespace: pol.Namespace, Name: pol.Name, Result: PolicySucceeded, Latest: latest}
	var wasReady, readyChanged bool
	wctx, cancel := writeContext(ctx)
	defer cancel()
	started := evaluatedRevision(pol)
	updated, err := e.status().write(wctx, pol, func(p *v1.ImagePolicy) error {
		// The outcome was derived from the status as read: written over another evaluation's,
		// it could take latestRef back.
		if evaluatedRevision(p) != started {
			return fmt.Errorf("ImagePolicy %s/%s: %w", pol.Namespace, pol.Name, errStatusMoved)
		}
		st := &p.Status
		wasReady = apimeta.IsStatusConditionTrue(st.Conditions, v1.ReadyCondition)
		out.Changed, out.Previous, readyChanged = res.apply(st)
		return nil
	})
	if err != nil {
		out.Result, out.Latest = PolicyFailed, pol.Status.LatestRef
		return out, fmt.Errorf("writing the status of ImagePolicy %s/%s: %w", pol.Namespace, pol.Name, err)
	}
	markStep(ctx, "written")
	e.remember(pol, inputs)
	normal, warning := successEvents{changed: out.Changed, wasReady: wasReady, readyChanged: readyChanged, note: note}.of()
	if normal {
		e.Recorder.Normal(updated, v1.SucceededReason, readyMessage(&updated.Status))
	}
	if warning {
		e.Recorder.Warning(updated, v1.VerificationErrorReason, note)
	}
	if out.Changed && e.Sink != nil {
		data := events.LatestChanged{Namespace: pol.Namespace, Name: pol.Name, Previous: out.Previous, Latest: latest}
		if err := e.Sink.Send(ctx, events.TypeLatestChanged, pol.Namespace+"/"+pol.Name, data); err != nil {
			// The status holds the change; the sink's consumers catch up from it.
			logger(e.Log).WarnContext(ctx, "announcing a new latest image", "namespace", pol.Namespace, "name", pol.Name,
				"latest", latest.String(), "error", err)
		}
	}
	return out, nil
}

// resolution is a successful evaluation of a policy's generation: the latest image, the
// reconcile request handled (if any), the tag revision read, the note on skipped tags (if any)
// and the TagsEvaluated reason.
type resolution struct {
	generation int64
	latest     *v1.ImageRef
	request    string
	revision   string
	note       string
	evaluated  string
}

// resolutionOf is the resolution of pol's generation that a success with latest, from inputs,
// writes; skipped are the better candidates whose signatures did not verify.
func resolutionOf(pol *v1.ImagePolicy, latest *v1.ImageRef, inputs policyInputs, skipped []skippedTag) resolution {
	evaluated := v1.EvaluatedReason
	if len(skipped) > 0 {
		evaluated = v1.SkippedUnverifiedReason
	}
	return resolution{generation: pol.Generation, latest: latest, request: inputs.request,
		revision: inputs.revision, note: skippedNoteOf(skipped), evaluated: evaluated}
}

// apply writes r into st: latestRef (and observedPreviousRef when it changes), the request
// handled, Ready=True with Flux's message and the note, and TagsEvaluated with the revision.
// It returns whether latestRef changed, and the one it replaced.
func (r resolution) apply(st *v1.ImagePolicyStatus) (changed bool, previous *v1.ImageRef, readyChanged bool) {
	if st.LatestRef == nil || *st.LatestRef != *r.latest {
		changed, previous = true, st.LatestRef
		st.ObservedPreviousRef = st.LatestRef
		ref := *r.latest
		st.LatestRef = &ref
	}
	st.ObservedGeneration = r.generation
	if r.request != "" {
		st.LastHandledReconcileAt = r.request
	}
	readyChanged = markSucceeded(&st.Conditions, r.generation, withNote(readyMessage(st), r.note))
	// The cron reconciler compares the revision with the repository's to find policies whose
	// TagsChanged event was lost. The condition's message repeats it for people (and for a
	// reflector of before the field, rolled back to, which compares the message).
	st.ObservedTagsRevision = r.revision
	set(&st.Conditions, metav1.Condition{Type: v1.TagsEvaluatedCondition, Status: metav1.ConditionTrue, Reason: r.evaluated,
		Message: r.revision, ObservedGeneration: r.generation})
	return changed, previous, readyChanged
}

// successEvents is what a successful evaluation's Events depend on: whether latestRef changed,
// whether the policy was Ready before, whether the evaluation changed its Ready condition, and
// the note on skipped tags.
type successEvents struct {
	changed      bool
	wasReady     bool
	readyChanged bool
	note         string
}

// of tells which Events a success records: a Normal one with Flux's message when latestRef
// changed or the policy was not Ready; a Warning with the note when there is one and latestRef
// or the Ready condition changed, so that a note already reported is not repeated.
func (s successEvents) of() (normal, warning bool) {
	normal = s.changed || !s.wasReady
	warning = s.note != "" && (s.changed || s.readyChanged)
	return normal, warning
}

// withNote appends note to message.
func withNote(message, note string) string {
	if note == "" {
		return message
	}
	return message + "; " + note
}

// readyMessage is Flux's Ready message of a resolved ImagePolicy.
func readyMessage(st *v1.ImagePolicyStatus) string {
	latest := st.LatestRef
	if prev := st.ObservedPreviousRef; prev != nil && prev.Tag != "" && prev.Tag != latest.Tag {
		return fmt.Sprintf("Latest image tag for '%s' updated from %s to %s", latest.Name, prev.Tag, latest.Tag)
	}
	return fmt.Sprintf("Latest image tag for '%s' resolved to %s", latest.Name, latest.Tag)
}

// fail writes a failed evaluation, leaving latestRef and observedPreviousRef as they are
// (statusWriter.fail).
func (e *Evaluator) fail(ctx context.Context, pol *v1.ImagePolicy, reason string, stalled bool, cause error) (PolicyOutcome, error) {
	out := PolicyOutcome{Namespace: pol.Namespace, Name: pol.Name, Result: PolicyFailed,
		Latest: pol.Status.LatestRef, Reason: reason, Message: failureMessage(cause)}
	if stalled {
		out.Result = PolicyStalled
	}
	updated, err := e.status().fail(ctx, pol, reason, stalled, out.Message)
	out.Latest = updated.Status.LatestRef
	return out, err
}

// blockedReference is the refusal of pol under Flux's --no-cross-namespace-refs (noCross): its
// imageRepositoryRef names another namespace than its own. It is nil when the reference may be
// followed.
func blockedReference(pol *v1.ImagePolicy, noCross bool) error {
	repoNS, repoName := pol.RepositoryNamespace(), pol.Spec.ImageRepositoryRef.Name
	if !noCross || repoNS == pol.Namespace {
		return nil
	}
	return fmt.Errorf("failed to get the referred ImageRepository: cannot access '%s/%s/%s', cross-namespace references have been blocked",
		v1.ImageRepositoryKind, repoNS, repoName)
}

// crossNamespaceDenied is the one answer to a policy whose ImageRepository in another namespace
// does not exist or does not admit the policy's namespace: the policy's owner learns neither
// which, nor whether the name exists there.
func crossNamespaceDenied(pol *v1.ImagePolicy, repoNS, repoName string) error {
	return fmt.Errorf("failed to get the referred ImageRepository: access denied: %s '%s/%s' does not exist or its accessFrom does not admit namespace '%s'",
		v1.ImageRepositoryKind, repoNS, repoName, pol.Namespace)
}

// refuse records that pol may not use the ImageRepository of another namespace it refers to
// (reason AccessDenied, Stalled when stalled), as fail does, unless its status already reports
// that refusal for its generation and its reconcile request: then nothing is written and no
// Event recorded. The reason, the stall and the generation tell that refusal; the message
// follows from them and the spec, and is not read. Evaluations that repeat a refusal follow the other namespace's repository (its
// tags changing, its creation or deletion), so writing each of them would tell the policy's
// namespace what happens there. why, which may name what the answer hides, goes only to the
// function's log.
func (e *Evaluator) refuse(ctx context.Context, pol *v1.ImagePolicy, stalled bool, why string, cause error) (PolicyOutcome, error) {
	logger(e.Log).InfoContext(ctx, "cross-namespace reference refused", "namespace", pol.Namespace, "name", pol.Name,
		"repository", pol.RepositoryNamespace()+"/"+pol.Spec.ImageRepositoryRef.Name, "why", why)
	message := failureMessage(cause)
	st := &pol.Status
	if repeatsRefusal(pol, stalled) {
		out := PolicyOutcome{Namespace: pol.Namespace, Name: pol.Name, Result: PolicyFailed,
			Latest: st.LatestRef, Reason: v1.AccessDeniedReason, Message: message}
		if stalled {
			out.Result = PolicyStalled
		}
		return out, nil
	}
	return e.fail(ctx, pol, v1.AccessDeniedReason, stalled, cause)
}

// repeatsRefusal tells whether pol's status already reports a refusal of its cross-namespace
// reference (Ready=False with AccessDenied, Stalled as stalled) for its generation and its
// reconcile request, if any.
func repeatsRefusal(pol *v1.ImagePolicy, stalled bool) bool {
	st := &pol.Status
	token, _ := kube.ReconcileRequest(pol.Annotations)
	ready := apimeta.FindStatusCondition(st.Conditions, v1.ReadyCondition)
	return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == v1.AccessDeniedReason &&
		ready.ObservedGeneration == pol.Generation && st.ObservedGeneration == pol.Generation &&
		apimeta.IsStatusConditionTrue(st.Conditions, v1.StalledCondition) == stalled &&
		(token == "" || token == st.LastHandledReconcileAt)
}

// noTagsFailure is the failure of a policy whose repository has no stored tags for it as it is
// now; cause is the store's answer, if any.
func noTagsFailure(repo *v1.ImageRepository, cause error) failure {
	why, reason := "it has not been scanned yet", v1.DependencyNotReadyReason
	switch {
	case errors.Is(cause, store.ErrOtherIdentity):
		why = "the stored ones were listed for another object, image or exclusion list; waiting for a scan of its current spec"
	case errors.Is(cause, store.ErrRebuilt) && repo.Status.LastScanResult != nil:
		// Its tags were lost with a damaged store; the cron reconciler has it scanned again.
		why, reason = fmt.Sprintf("they were lost when the tag store was found damaged and rebuilt; waiting for its next scan (%v)", cause), v1.TagStoreDamagedReason
	}
	return failure{reason, false, fmt.Errorf(
		"no tags in the tag store for %s %s/%s: %s", v1.ImageRepositoryKind, repo.Namespace, repo.Name, why)}
}

// storeUnreadable is the decision on pol when the tag store could not be read: the failure, and
// the read error as the evaluator's own as well, so that the request is delivered again.
func storeUnreadable(pol *v1.ImagePolicy, cause error) decision {
	d := failed(pol, failure{StoreReason(cause), false, fmt.Errorf("failed to read tags from the tag store: %w", cause)})
	d.retry = fmt.Errorf("ImagePolicy %s/%s: %w", pol.Namespace, pol.Name, cause)
	return d
}

// status writes ImagePolicy status.
func (e *Evaluator) status() statusWriter[*v1.ImagePolicy] {
	return statusWriter[*v1.ImagePolicy]{objects: e.Kube.Policies, fields: policyFields, recorder: e.Recorder}
}

// unchanged tells whether pol was last evaluated successfully, by this process, from the same
// inputs, and its status still shows that result, including the tag revision it was evaluated
// against. A policy that reflects digests Always is never unchanged: the registry may have moved
// its tag. Nor is one that skipped better tags whose signatures did not verify: they may have
// been signed since.
func (e *Evaluator) unchanged(pol *v1.ImagePolicy, in policyInputs) bool {
	st := &pol.Status
	if pol.GetDigestReflectionPolicy() == v1.ReflectAlways || st.LatestRef == nil ||
		st.ObservedGeneration != pol.Generation || st.LastHandledReconcileAt != in.request && in.request != "" ||
		!apimeta.IsStatusConditionTrue(st.Conditions, v1.ReadyCondition) || skippedUnverified(st.Conditions) {
		return false
	}
	if st.ObservedTagsRevision != in.revision || apimeta.FindStatusCondition(st.Conditions, v1.TagsEvaluatedCondition) == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	last, ok := e.done[StoreKey(pol.Namespace, pol.Name)]
	return ok && last == in
}

func (e *Evaluator) remember(pol *v1.ImagePolicy, in policyInputs) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done == nil {
		e.done = map[string]policyInputs{}
	}
	e.done[StoreKey(pol.Namespace, pol.Name)] = in
}

func (e *Evaluator) forget(namespace, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.done, StoreKey(namespace, name))
}
