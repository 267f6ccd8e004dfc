package receiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// secretCache holds the token of each namespace's receiver for a short time, so that a burst
// of deliveries reads the Secret once, and a namespace without one (404) is not looked up on
// every forged request. Errors other than NotFound are not cached.
type secretCache struct {
	core kubernetes.Interface
	ttl  time.Duration
	now  func() time.Time

	mu      sync.Mutex
	entries map[string]*secretEntry
}

type secretEntry struct {
	ready   chan struct{}
	token   []byte
	err     error
	expires time.Time
}

// maxCachedSecrets bounds the cache: namespaces come from request paths, so a sender could
// otherwise fill it with names that have no Secret.
const maxCachedSecrets = 4096

func newSecretCache(core kubernetes.Interface, ttl time.Duration, now func() time.Time) *secretCache {
	return &secretCache{core: core, ttl: ttl, now: now, entries: map[string]*secretEntry{}}
}

// token returns the token of namespace's receiver, nil when the namespace has no receiver.
func (c *secretCache) token(ctx context.Context, namespace string) ([]byte, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[namespace]
	if ok {
		select {
		case <-e.ready:
			if now.After(e.expires) || e.err != nil {
				ok = false
			}
		default:
		}
	}
	if !ok {
		if len(c.entries) >= maxCachedSecrets {
			c.evictExpired(now)
		}
		e = &secretEntry{ready: make(chan struct{})}
		c.entries[namespace] = e
		c.mu.Unlock()
		e.token, e.err = c.read(ctx, namespace)
		e.expires = now.Add(c.ttl)
		close(e.ready)
		if e.err != nil {
			c.mu.Lock()
			if c.entries[namespace] == e {
				delete(c.entries, namespace)
			}
			c.mu.Unlock()
		}
		return e.token, e.err
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
		return e.token, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *secretCache) read(ctx context.Context, namespace string) ([]byte, error) {
	s, err := c.core.CoreV1().Secrets(namespace).Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, SecretName, err)
	}
	return s.Data[SecretKey], nil
}

// evictExpired drops expired entries, and every entry when none has expired; c.mu is held.
func (c *secretCache) evictExpired(now time.Time) {
	for ns, e := range c.entries {
		select {
		case <-e.ready:
			if now.After(e.expires) {
				delete(c.entries, ns)
			}
		default:
		}
	}
	if len(c.entries) >= maxCachedSecrets {
		clear(c.entries)
	}
}
