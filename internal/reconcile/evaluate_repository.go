package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// EvaluateRepository evaluates every ImagePolicy, in any namespace, that refers to the
// ImageRepository repoNamespace/repoName: the work after a scan changed its tags. Whether a
// policy of another namespace may use the repository is decided by each evaluation, from the
// repository's accessFrom. The repository and its tags are read once for all of them.
//
// The error joins the evaluator's own failures; the outcomes of the policies that were evaluated
// are returned with it.
func (e *Evaluator) EvaluateRepository(ctx context.Context, repoNamespace, repoName string) ([]PolicyOutcome, error) {
	return e.evaluateRepository(ctx, e.newPolicyWorld(ctx), repoNamespace, repoName)
}

func (e *Evaluator) evaluateRepository(ctx context.Context, w *policyWorld, repoNamespace, repoName string) ([]PolicyOutcome, error) {
	// The repository and the revision of its tags are read while the policies are listed;
	// policies found in the watched copies need no listing, and the read is left out when every
	// one of them works from the watched repository (policyWorld.fromCopy).
	var prefetch sync.WaitGroup
	defer prefetch.Wait()
	fetch := func() { prefetch.Go(func() { w.prefetch(ctx, repoNamespace, repoName) }) }
	pols, ok := e.watchedPolicies(repoNamespace, repoName)
	switch {
	case !ok:
		fetch()
		var err error
		if pols, err = e.listPolicies(ctx, repoNamespace, repoName); err != nil {
			return nil, err
		}
	case w.needsRead(pols, repoNamespace, repoName):
		fetch()
	}
	outs, err := e.evaluateAll(ctx, w, pols)
	return outs, err
}

// evaluateFresh evaluates pol, as listed, and once more as it is now when its spec or its
// evaluated revision changed before the outcome was written (a watched copy may be a moment
// behind, and another evaluation may have written since). The second evaluation
// reads the tags afresh: those read for the first may be older than what the status now records.
func (e *Evaluator) evaluateFresh(ctx context.Context, w *policyWorld, pol *v1.ImagePolicy) (PolicyOutcome, error) {
	out, err := e.evaluate(ctx, w, pol)
	if !errors.Is(err, errSpecChanged) && !errors.Is(err, errStatusMoved) {
		return out, err
	}
	fresh, gerr := e.Kube.Policies.Get(ctx, pol.Namespace, pol.Name)
	if gerr != nil {
		return out, errors.Join(err, gerr)
	}
	if errors.Is(err, errStatusMoved) {
		w = w.again()
	}
	return e.evaluate(ctx, w, fresh)
}

// watchedPolicies returns the ImagePolicies that refer to the repository repoNamespace/repoName
// from the evaluator's watched copies (Policies); ok is false on a miss: without copies, before
// their first listing has arrived, and when they hold no policy of the repository, which may be
// one whose policies were all created a moment ago (listPolicies reads those).
//
// A policy the copies do not hold yet while they hold others of the repository is evaluated by
// its own event: that evaluation, of a policy without an outcome of its current spec, reads the
// repository and its stored revision again after its status write and evaluates once more when
// they moved (Evaluate), so tags stored before that second read reach it there, and tags stored
// after it reach it through copies that have had the time of its whole evaluation to show it.
func (e *Evaluator) watchedPolicies(repoNamespace, repoName string) ([]*v1.ImagePolicy, bool) {
	if e.Policies == nil {
		return nil, false
	}
	pols, ok := e.Policies.Indexed(RepositoryIndex, StoreKey(repoNamespace, repoName))
	return pols, ok && len(pols) > 0
}

// listPolicies lists the ImagePolicies that refer to the repository repoNamespace/repoName with
// a consistent read, which sees every policy created before it: the one read of a repository's
// policies when the watched copies miss (watchedPolicies). The CRD declares
// spec.imageRepositoryRef.name a selectable field, so the apiserver sends only the policies that
// refer to a repository of that name. Flux's own CRD does not; with it installed the selector is
// refused and every policy is listed.
func (e *Evaluator) listPolicies(ctx context.Context, repoNamespace, repoName string) ([]*v1.ImagePolicy, error) {
	keep := func(p *v1.ImagePolicy) bool { return PolicyRepository(p) == StoreKey(repoNamespace, repoName) }
	pols, err := e.policies(ctx, fields.OneTermEqualSelector(RepositoryRefField, repoName).String(), keep)
	if apierrors.IsBadRequest(err) {
		pols, err = e.policies(ctx, "", keep)
	}
	if err != nil {
		return nil, fmt.Errorf("listing ImagePolicies: %w", err)
	}
	return pols, nil
}

// RepositoryRefField is the ImagePolicy field that the CRD makes selectable.
const RepositoryRefField = "spec.imageRepositoryRef.name"

// policies pages consistently through the ImagePolicies of the cluster that fieldSelector
// selects and returns those keep accepts.
func (e *Evaluator) policies(ctx context.Context, fieldSelector string, keep func(*v1.ImagePolicy) bool) ([]*v1.ImagePolicy, error) {
	var out []*v1.ImagePolicy
	opts := metav1.ListOptions{Limit: e.PageSize, FieldSelector: fieldSelector}
	err := e.Kube.Policies.Pages(ctx, "", opts, func(l *v1.ImagePolicyList) error {
		for i := range l.Items {
			if p := &l.Items[i]; keep(p) {
				out = append(out, p)
			}
		}
		return nil
	})
	return out, err
}

// evaluateAll evaluates pols, as listed, with bounded concurrency and one shared view w of the
// repositories, namespaces and tags they refer to. Policies are taken repository by repository,
// so that each repository's tags are read once and dropped when its policies are done.
func (e *Evaluator) evaluateAll(ctx context.Context, w *policyWorld, pols []*v1.ImagePolicy) ([]PolicyOutcome, error) {
	repoKey := func(p *v1.ImagePolicy) string {
		return StoreKey(p.RepositoryNamespace(), p.Spec.ImageRepositoryRef.Name)
	}
	slices.SortStableFunc(pols, func(a, b *v1.ImagePolicy) int { return strings.Compare(repoKey(a), repoKey(b)) })
	for _, p := range pols {
		w.expect(repoKey(p))
	}
	outs := make([]PolicyOutcome, len(pols))
	errs := make([]error, len(pols))
	conc := e.Concurrency
	if conc <= 0 {
		conc = DefaultEvaluateConcurrency
	}
	var g errgroup.Group
	g.SetLimit(conc)
	started := 0
	for i, pol := range pols {
		if ctx.Err() != nil {
			break
		}
		started++
		// Errors are kept per policy: one failed evaluation does not stop the others.
		g.Go(func() error {
			start := clock(e.Now)()
			ctx := withSteps(ctx)
			out, err := e.evaluateFresh(ctx, w, pol)
			outs[i], errs[i] = e.logged(ctx, out, start, err)
			w.release(repoKey(pol))
			return nil
		})
	}
	_ = g.Wait()
	if started < len(pols) {
		errs = append(errs[:started], fmt.Errorf("%d ImagePolicies not evaluated: %w", len(pols)-started, context.Cause(ctx)))
	}
	return outs[:started], errors.Join(errs...)
}
