package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/store"
)

// policyWorld is what the evaluations of one call read besides the policies themselves: the
// repositories, the labels of namespaces and the stored tags. Each is read once per call, so the
// hundred policies of one repository cost one read of its object and of its tags.
type policyWorld struct {
	e *Evaluator
	// ctx is the call's; each read of the tag store waits for it at most wait.
	ctx  context.Context
	wait time.Duration

	mu sync.Mutex
	// users counts the evaluations still to come per repository key, so that a long sweep holds
	// the tags of only the repositories it is working on.
	users      map[string]int
	repos      map[string]*lazyValue[*v1.ImageRepository]
	copies     map[string]*lazyValue[*v1.ImageRepository]
	namespaces map[string]*lazyValue[labels.Set]
	revisions  map[string]*lazyValue[string]
	entries    map[string]*lazyValue[store.Entry]
	// delta is the verified addition of the event being handled, if any: policies that read its
	// starting revision advance by it without reading the store.
	delta *delta
}

// lazyValue is a value loaded once, by whichever evaluation needs it first.
type lazyValue[T any] struct {
	once sync.Once
	v    T
	err  error
}

func (e *Evaluator) newPolicyWorld(ctx context.Context) *policyWorld {
	wait := e.StoreWait
	if wait <= 0 {
		wait = DefaultStoreWait
	}
	// A caller with a deadline gets a store wait that leaves time to record its failure.
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)*3/4)
	}
	return &policyWorld{
		e: e, ctx: ctx, wait: wait,
		users:      map[string]int{},
		repos:      map[string]*lazyValue[*v1.ImageRepository]{},
		copies:     map[string]*lazyValue[*v1.ImageRepository]{},
		namespaces: map[string]*lazyValue[labels.Set]{},
		revisions:  map[string]*lazyValue[string]{},
		entries:    map[string]*lazyValue[store.Entry]{},
	}
}

// again returns a world like w that reads every value afresh, for an evaluation whose first
// attempt may have read tags older than what a status now records.
func (w *policyWorld) again() *policyWorld {
	fresh := w.e.newPolicyWorld(w.ctx)
	fresh.wait, fresh.delta = w.wait, w.delta
	return fresh
}

// expect announces one more evaluation of a policy of the repository key.
func (w *policyWorld) expect(key string) {
	w.mu.Lock()
	w.users[key]++
	w.mu.Unlock()
}

// release forgets what was read for the repository key once its last expected evaluation ended.
func (w *policyWorld) release(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.users[key]--; w.users[key] > 0 {
		return
	}
	delete(w.users, key)
	delete(w.repos, key)
	delete(w.copies, key)
	delete(w.revisions, key)
	delete(w.entries, key)
}

// load returns the value of key in m, loading it on first use.
func load[T any](w *policyWorld, m map[string]*lazyValue[T], key string, fn func() (T, error)) (T, error) {
	w.mu.Lock()
	lv, ok := m[key]
	if !ok {
		lv = &lazyValue[T]{}
		m[key] = lv
	}
	w.mu.Unlock()
	lv.once.Do(func() { lv.v, lv.err = fn() })
	return lv.v, lv.err
}

func (w *policyWorld) repository(ctx context.Context, namespace, name string) (*v1.ImageRepository, error) {
	return load(w, w.repos, StoreKey(namespace, name), func() (*v1.ImageRepository, error) {
		return w.e.Kube.Repositories.Get(ctx, namespace, name)
	})
}

// repositoryFor returns the repository that the evaluation of pol works from: the watched copy
// when fromCopy offers it for pol, else a consistent read (repository).
func (w *policyWorld) repositoryFor(ctx context.Context, pol *v1.ImagePolicy, namespace, name string) (*v1.ImageRepository, error) {
	if pol.Namespace == namespace {
		if repo := w.fromCopy(namespace, name); repo != nil {
			return repo, nil
		}
	}
	return w.repository(ctx, namespace, name)
}

// fromCopy returns the evaluator's watched copy of the repository namespace/name when the
// policies of its own namespace may be evaluated from it instead of a consistent read: the event
// carries a delta, and the copy shows the identity (object, image, exclusion list) the delta was
// added for. A copy a moment behind an edit of that identity is healed by the edit itself: its
// scan lists the tags for the new identity and announces them without a delta, and every policy
// is then evaluated from the store, with a status write conditional on the revision the advance
// wrote. A policy of another namespace never uses it: whether accessFrom lets it in is read
// consistently. nil when there is no such copy.
func (w *policyWorld) fromCopy(namespace, name string) *v1.ImageRepository {
	if w.delta == nil || w.e.Repositories == nil {
		return nil
	}
	repo, _ := load(w, w.copies, StoreKey(namespace, name), func() (*v1.ImageRepository, error) {
		repo, ok := w.e.Repositories.Get(namespace, name)
		if !ok {
			return nil, nil
		}
		if id, err := RepositoryIdentity(repo); err != nil || id != w.delta.id {
			return nil, nil
		}
		return repo, nil
	})
	return repo
}

// needsRead tells whether an evaluation of one of pols, the policies of the repository
// namespace/name, reads the repository consistently rather than from the watched copy.
func (w *policyWorld) needsRead(pols []*v1.ImagePolicy, namespace, name string) bool {
	for _, p := range pols {
		if p.Namespace != namespace {
			return true
		}
	}
	return w.fromCopy(namespace, name) == nil
}

// prefetch reads the repository namespace/name and the revision of its stored tags, as the
// evaluations of its policies will, so that they find both read.
func (w *policyWorld) prefetch(ctx context.Context, namespace, name string) {
	repo, err := w.repository(ctx, namespace, name)
	if err != nil {
		return
	}
	// With a delta of this identity the store is read only by the policies it does not advance.
	if id, err := RepositoryIdentity(repo); err == nil && (w.delta == nil || w.delta.id != id) {
		_, _ = w.revision(StoreKey(namespace, name), id)
	}
}

func (w *policyWorld) namespaceLabels(ctx context.Context, namespace string) (labels.Set, error) {
	return load(w, w.namespaces, namespace, func() (labels.Set, error) {
		ns, err := w.e.Kube.Namespaces.Get(ctx, "", namespace)
		if err != nil {
			return nil, err
		}
		return labels.Set(ns.Labels), nil
	})
}

// revision returns the revision stored under key for id without reading the tags, which an
// evaluation that turns out to be unchanged never needs. id is derived from the repository this
// world read for key, so it is the same for every evaluation that shares the cached answer.
func (w *policyWorld) revision(key string, id store.Identity) (string, error) {
	return load(w, w.revisions, key, func() (string, error) {
		ctx, cancel := context.WithTimeout(w.ctx, w.wait)
		defer cancel()
		return w.e.Store.Revision(ctx, key, id)
	})
}

// storeMoved reports whether the tags stored under read's key and identity have a revision
// other than read's now, read afresh; for a read of a repository that did not exist, whether it
// exists now, read consistently, with tags stored for its identity. False when read is nil or
// the apiserver or the store cannot say.
func (w *policyWorld) storeMoved(read *storeRead) bool {
	if read == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.wait)
	defer cancel()
	id := read.id
	if read.noRepository {
		namespace, name, _ := strings.Cut(read.key, "/")
		repo, err := w.e.Kube.Repositories.Get(ctx, namespace, name)
		if err != nil {
			return false
		}
		if id, err = RepositoryIdentity(repo); err != nil {
			return false
		}
	}
	rev, err := w.e.Store.Revision(ctx, read.key, id)
	return err == nil && rev != read.revision
}

func (w *policyWorld) entry(key string, id store.Identity) (store.Entry, error) {
	return load(w, w.entries, key, func() (store.Entry, error) {
		ctx, cancel := context.WithTimeout(w.ctx, w.wait)
		defer cancel()
		return w.e.Store.Get(ctx, key, id)
	})
}

// accessDenied applies the repository's accessFrom to a policy in another namespace, as Flux
// does: without accessFrom only its own namespace may refer to it; otherwise the labels of the
// policy's namespace must match one of the selectors (an empty selector matches every
// namespace). The first result describes a denial, in Flux's words, for the function's log: the
// policy's status gives one answer for every denial (crossNamespaceDenied). The error is a
// failure to decide.
func (w *policyWorld) accessDenied(ctx context.Context, pol *v1.ImagePolicy, repo *v1.ImageRepository) (denied, err error) {
	var nsLabels labels.Set
	if repo.Namespace != pol.Namespace && repo.Spec.AccessFrom != nil {
		if nsLabels, err = w.namespaceLabels(ctx, pol.Namespace); err != nil {
			return nil, fmt.Errorf("reading the labels of namespace %s: %w", pol.Namespace, err)
		}
	}
	return accessFromDenies(repo, pol.Namespace, nsLabels), nil
}

// accessFromDenies is accessDenied's decision for a policy in namespace ns, whose labels are
// nsLabels (read only when repo is in another namespace and has accessFrom): nil when repo
// admits it, else the denial in Flux's words.
func accessFromDenies(repo *v1.ImageRepository, ns string, nsLabels labels.Set) error {
	if repo.Namespace == ns {
		return nil
	}
	ref := repo.Namespace + "/" + repo.Name
	if repo.Spec.AccessFrom == nil {
		return fmt.Errorf("'%s' can't be accessed due to missing ACL labels on 'accessFrom'", ref)
	}
	for _, s := range repo.Spec.AccessFrom.NamespaceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: s.MatchLabels})
		if err != nil {
			return fmt.Errorf("'%s' has an invalid accessFrom selector %v: %w", ref, s.MatchLabels, err)
		}
		if sel.Matches(nsLabels) {
			return nil
		}
	}
	return fmt.Errorf("'%s' can't be accessed due to ACL labels mismatch on namespace '%s'", ref, ns)
}
