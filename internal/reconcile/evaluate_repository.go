package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	var refs []*v1.ImagePolicy
	cont := ""
	for {
		limit := e.PageSize
		if limit <= 0 {
			limit = 500
		}
		list, err := e.Kube.Policies.List(ctx, "", metav1.ListOptions{Limit: limit, Continue: cont})
		if err != nil {
			return nil, fmt.Errorf("listing ImagePolicies: %w", err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.RepositoryNamespace() == repoNamespace && p.Spec.ImageRepositoryRef.Name == repoName {
				refs = append(refs, p)
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}

	w := e.newPolicyWorld(ctx)
	defer w.close()
	outs := make([]PolicyOutcome, len(refs))
	errs := make([]error, len(refs))
	conc := e.Concurrency
	if conc <= 0 {
		conc = DefaultEvaluateConcurrency
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i, pol := range refs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := e.now()
			out, err := e.evaluate(ctx, w, pol)
			outs[i], errs[i] = e.logged(out, start, err)
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}
