package receiver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/webhook"
)

// target is one ImageRepository that a delivery is about, with the tags it names.
type target struct {
	namespace, name string
	timeout         time.Duration
	// tags are the pushed tags; full means some event named none, so only a full listing
	// answers it.
	tags []string
	full bool
}

func (t target) object() Object { return Object{Namespace: t.namespace, Name: t.name} }

func (t target) hint() *reconcile.Hint {
	if t.full || len(t.tags) == 0 {
		return nil
	}
	return &reconcile.Hint{Tags: t.tags}
}

// match finds the ImageRepositories of namespace ("" for all) whose image has the key of one
// of evs, in list order, from the catalog. Suspended repositories are left out: they are not
// scanned, so a request for them would only wait for their resumption, which requests a scan
// by itself.
func (r *Receiver) match(ctx context.Context, namespace string, evs []webhook.Event) ([]target, error) {
	wanted := map[string][]webhook.Event{}
	for _, e := range evs {
		wanted[e.Key()] = append(wanted[e.Key()], e)
	}
	pick := func(repos []repoEntry) []target {
		var out []target
		for _, e := range repos {
			// An invalid spec.image has no key; the repository's own scan reports it.
			if matched, ok := wanted[e.key]; ok && e.key != "" && !e.suspended {
				out = append(out, newTarget(e, matched))
			}
		}
		return out
	}
	repos, remembered, err := r.repos.repositories(ctx, namespace, false)
	if err != nil {
		return nil, err
	}
	if out := pick(repos); len(out) > 0 || !remembered {
		return out, nil
	}
	// Nothing matched a remembered listing: ask the apiserver before answering so.
	if repos, _, err = r.repos.repositories(ctx, namespace, true); err != nil {
		return nil, err
	}
	return pick(repos), nil
}

func newTarget(repo repoEntry, evs []webhook.Event) target {
	t := target{namespace: repo.namespace, name: repo.name, timeout: repo.timeout}
	for _, e := range evs {
		if e.Tag == "" {
			t.full = true
		} else if !slices.Contains(t.tags, e.Tag) {
			t.tags = append(t.tags, e.Tag)
		}
	}
	return t
}

// annotateConcurrency bounds the annotation patches of one delivery under way at once.
const annotateConcurrency = 8

// annotate sets the reconcile-request annotation on each target: the commit point. The
// patches run concurrently, because the sender waits for all of them. It returns the targets
// annotated, in order, and the first error; it goes on after an error so that every object it
// can reach carries the request.
func (r *Receiver) annotate(ctx context.Context, targets []target) ([]target, error) {
	token := kube.RequestToken(r.cfg.now())
	errs := make([]error, len(targets))
	gone := make([]bool, len(targets))
	sem := make(chan struct{}, annotateConcurrency)
	var wg sync.WaitGroup
	for i, t := range targets {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := r.kube.Repositories.RequestReconcile(ctx, t.namespace, t.name, token)
			switch {
			case apierrors.IsNotFound(err):
				// Deleted since the listing: there is nothing to scan.
				gone[i] = true
			case err != nil:
				errs[i] = fmt.Errorf("annotating ImageRepository %s/%s: %w", t.namespace, t.name, err)
			}
		})
	}
	wg.Wait()
	var (
		done  []target
		first error
	)
	for i, t := range targets {
		if gone[i] {
			continue
		}
		if errs[i] != nil {
			if first == nil {
				first = errs[i]
			}
			continue
		}
		done = append(done, t)
	}
	return done, first
}

// objects returns the names of targets for an answer or a log line.
func objects(targets []target) []Object {
	out := make([]Object, len(targets))
	for i, t := range targets {
		out[i] = t.object()
	}
	return out
}

// objectNames renders targets as namespace/name for a log line.
func objectNames(targets []target) string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.namespace + "/" + t.name
	}
	return strings.Join(names, ",")
}

// deliveryKey is what a delivery is remembered by: its events' delivery ids, which a retry
// repeats. Scoping it by receiver keeps one receiver's deliveries from shadowing another's.
func deliveryKey(scope string, evs []webhook.Event) (key, id string) {
	var ids []string
	for _, e := range evs {
		if e.DeliveryID != "" && !slices.Contains(ids, e.DeliveryID) {
			ids = append(ids, e.DeliveryID)
		}
	}
	if len(ids) == 0 {
		return "", ""
	}
	slices.Sort(ids)
	id = strings.Join(ids, ",")
	return scope + "\x00" + id, id
}
