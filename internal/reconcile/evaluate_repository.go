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
	keep := func(p *v1.ImagePolicy) bool {
		return p.RepositoryNamespace() == repoNamespace && p.Spec.ImageRepositoryRef.Name == repoName
	}
	// The repository and the revision of its tags are read while the policies are listed;
	// policies found in the watched copies need no listing, and the read is left out when every
	// one of them works from the watched repository (policyWorld.fromCopy).
	var prefetch sync.WaitGroup
	defer prefetch.Wait()
	fetch := func() { prefetch.Go(func() { w.prefetch(ctx, repoNamespace, repoName) }) }
	pols, ok := e.watchedPolicies(w, repoNamespace, repoName, keep)
	switch {
	case !ok:
		fetch()
		var err error
		if pols, err = e.listPolicies(ctx, repoName, keep); err != nil {
			return nil, err
		}
	case w.needsRead(pols, repoNamespace, repoName):
		fetch()
	}
	outs, err := e.evaluateAll(ctx, w, pols)
	return outs, err
}

// evaluateFresh evaluates pol, as listed, and once more as it is now when its spec or its
// evaluated revision changed before the outcome was written (the listing may come from the
// apiserver's cache, and another evaluation may have written since). The second evaluation
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
// (keep tells them) from the evaluator's watched copies, for the event of a push (w.delta); ok
// is false without copies that can answer, and for any other event. The copies trail the
// apiserver's watch cache by the watch's delivery: a policy created a moment ago may be missing,
// and the first tags of a new repository, which arrive without a delta, would then reach
// neither it nor its own ApiServerSource event (evaluated before the tags were stored), so
// those are listed from the watch cache, which its event trails. An outcome of a spec or status
// that changed meanwhile is not written (evaluateFresh, advance).
func (e *Evaluator) watchedPolicies(w *policyWorld, repoNamespace, repoName string, keep func(*v1.ImagePolicy) bool) ([]*v1.ImagePolicy, bool) {
	if e.Policies == nil || w.delta == nil {
		return nil, false
	}
	pols, ok := e.Policies.Indexed(RepositoryIndex, StoreKey(repoNamespace, repoName))
	return slices.DeleteFunc(pols, func(p *v1.ImagePolicy) bool { return !keep(p) }), ok
}

// listPolicies lists the ImagePolicies that refer to a repository named repoName that keep
// accepts. The CRD declares spec.imageRepositoryRef.name a selectable field, so the apiserver
// sends only the policies that refer to a repository of that name. Flux's own CRD does not; with
// it installed the selector is refused and every policy is listed.
func (e *Evaluator) listPolicies(ctx context.Context, repoName string, keep func(*v1.ImagePolicy) bool) ([]*v1.ImagePolicy, error) {
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

// policies pages through the ImagePolicies of the cluster that fieldSelector selects and
// returns those keep accepts.
func (e *Evaluator) policies(ctx context.Context, fieldSelector string, keep func(*v1.ImagePolicy) bool) ([]*v1.ImagePolicy, error) {
	var out []*v1.ImagePolicy
	// From the apiserver's watch cache (resourceVersion 0): a consistent list waits for the
	// cache to catch up with etcd, about 95 ms after a write such as this push's status
	// (docs/benchmarks.md). A policy the cache has not seen yet is evaluated by its own
	// ApiServerSource event or the cron reconciler, and one whose spec changed meanwhile is not
	// written with the old spec's outcome (evaluateFresh).
	opts := metav1.ListOptions{Limit: e.PageSize, FieldSelector: fieldSelector, ResourceVersion: "0"}
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
