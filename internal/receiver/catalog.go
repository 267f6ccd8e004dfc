package receiver

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	kube     *kube.Client
	ttl      time.Duration
	pageSize int64
	now      func() time.Time

	mu     sync.Mutex
	scopes map[string]*listing
}

// listing is one listing of a scope, in flight until done is closed.
type listing struct {
	at    time.Time
	done  chan struct{}
	repos []repoEntry
	err   error
}

func newCatalog(c *kube.Client, ttl time.Duration, pageSize int64, now func() time.Time) *catalog {
	return &catalog{kube: c, ttl: ttl, pageSize: pageSize, now: now, scopes: map[string]*listing{}}
}

// repositories returns the ImageRepositories of namespace ("" for all). With fresh, or when
// the remembered listing is older than the ttl or failed, it lists them; otherwise it returns
// the remembered listing, waiting for one in flight. remembered tells which it was.
func (c *catalog) repositories(ctx context.Context, namespace string, fresh bool) (repos []repoEntry, remembered bool, err error) {
	c.mu.Lock()
	l := c.scopes[namespace]
	if l != nil && !fresh && c.ttl > 0 {
		select {
		case <-l.done:
			if l.err == nil && c.now().Sub(l.at) < c.ttl {
				c.mu.Unlock()
				return l.repos, true, nil
			}
		default:
			c.mu.Unlock()
			select {
			case <-l.done:
				return l.repos, true, l.err
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
		}
	}
	l = &listing{at: c.now(), done: make(chan struct{})}
	c.scopes[namespace] = l
	c.mu.Unlock()
	// Other deliveries may wait for this listing: a sender that hangs up must not fail it.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listTimeout)
	defer cancel()
	l.repos, l.err = c.list(lctx, namespace)
	close(l.done)
	return l.repos, false, l.err
}

// listTimeout bounds one listing of a scope.
const listTimeout = 30 * time.Second

// list pages through the ImageRepositories of namespace and keeps what matching needs.
func (c *catalog) list(ctx context.Context, namespace string) ([]repoEntry, error) {
	var out []repoEntry
	err := c.kube.Repositories.Pages(ctx, namespace, metav1.ListOptions{Limit: c.pageSize}, func(page *v1.ImageRepositoryList) error {
		for i := range page.Items {
			repo := &page.Items[i]
			e := repoEntry{namespace: repo.Namespace, name: repo.Name, suspended: repo.Spec.Suspend, timeout: repo.GetTimeout()}
			if key, err := imagename.KeyOf(repo.Spec.Image); err == nil {
				e.key = key
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing ImageRepositories: %w", err)
	}
	return out, nil
}
