package receiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/kube"
)

// repoEntry is what matching needs of one ImageRepository.
type repoEntry struct {
	namespace, name string
	// key is the image's match key; empty when spec.image is invalid.
	key       string
	suspended bool
	timeout   time.Duration
}

// catalog remembers, per scope (a namespace, or "" for the cluster), the ImageRepositories of
// the last listing for ttl, so that a burst of deliveries costs one listing a period rather
// than one each, and deliveries that arrive during a listing share it. A delivery that matches
// nothing in a remembered listing lists again before it answers "no match", so a repository
// created or edited since is never missed for that reason; the staleness left is a repository
// created with an image that an older one in scope already has (the cron reconciler scans it
// as never scanned) and one deleted since (its annotation finds it gone and it is dropped).
type catalog struct {
	kube *kube.Client
	// cached, when set, answers the listings that may come from the watch cache.
	cached   cachedRepositories
	ttl      time.Duration
	pageSize int64
	now      func() time.Time

	// listings shares a listing in flight between the deliveries of its scope.
	listings singleflight.Group
	mu       sync.Mutex
	scopes   map[string]listing
}

// listing is the last successful listing of a scope.
type listing struct {
	at    time.Time
	repos []repoEntry
}

func newCatalog(c *kube.Client, cached cachedRepositories, ttl time.Duration, pageSize int64, now func() time.Time) *catalog {
	return &catalog{kube: c, cached: cached, ttl: ttl, pageSize: pageSize, now: now, scopes: map[string]listing{}}
}

// repositories returns the ImageRepositories of namespace ("" for all). With fresh, or when
// the remembered listing is older than the ttl or failed, it lists them; otherwise it returns
// the remembered listing, waiting for one in flight. remembered tells that the listing may have
// started before this call or come from the apiserver's cache: it may miss a repository created
// a moment ago.
func (c *catalog) repositories(ctx context.Context, namespace string, fresh bool) (repos []repoEntry, remembered bool, err error) {
	// own: the listing must start after this call did. One in flight may have started before
	// what the caller looks for was created: start another, which later calls share instead.
	own := fresh || c.ttl <= 0
	if own {
		c.listings.Forget(namespace)
	} else {
		c.mu.Lock()
		l, ok := c.scopes[namespace]
		c.mu.Unlock()
		if ok && c.now().Sub(l.at) < c.ttl {
			return l.repos, true, nil
		}
	}
	ch := c.listings.DoChan(namespace, func() (any, error) {
		at := c.now()
		// Other deliveries may wait for this listing: a sender that hangs up must not fail it.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listTimeout)
		defer cancel()
		repos, err := c.list(lctx, namespace, !own)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.scopes[namespace].at.Before(at) {
			c.scopes[namespace] = listing{at: at, repos: repos}
		}
		c.mu.Unlock()
		return repos, nil
	})
	select {
	case res := <-ch:
		repos, _ := res.Val.([]repoEntry)
		// A listing of the cache may miss what was created a moment ago, like a remembered one.
		return repos, !own, res.Err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// listTimeout bounds one listing of a scope.
const listTimeout = 30 * time.Second

// list pages through the ImageRepositories of namespace and keeps what matching needs. cached
// takes them from the watch's copies when the catalog has them, else lists the apiserver's
// watch cache (resourceVersion 0), which answers at once, where a consistent list waits for the
// cache to catch up with etcd after a write (about 95 ms); either may be a moment behind, and
// the caller then treats the listing as remembered, possibly stale.
func (c *catalog) list(ctx context.Context, namespace string, cached bool) ([]repoEntry, error) {
	var out []repoEntry
	if cached && c.cached != nil && c.cached.Range(namespace, func(repo *v1.ImageRepository) {
		out = append(out, newRepoEntry(repo))
	}) {
		return out, nil
	}
	opts := metav1.ListOptions{Limit: c.pageSize}
	if cached {
		opts.ResourceVersion = "0"
	}
	err := c.kube.Repositories.Pages(ctx, namespace, opts, func(page *v1.ImageRepositoryList) error {
		for i := range page.Items {
			out = append(out, newRepoEntry(&page.Items[i]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing ImageRepositories: %w", err)
	}
	return out, nil
}

// newRepoEntry keeps what matching needs of repo.
func newRepoEntry(repo *v1.ImageRepository) repoEntry {
	e := repoEntry{namespace: repo.Namespace, name: repo.Name, suspended: repo.Spec.Suspend, timeout: repo.GetTimeout()}
	if key, err := imagename.KeyOf(repo.Spec.Image); err == nil {
		e.key = key
	}
	return e
}
