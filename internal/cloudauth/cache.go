package cloudauth

import (
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// DefaultCacheSize is the number of registry credentials an Authenticator keeps.
const DefaultCacheSize = 1024

// renewBefore is how long before their expiry cached credentials are renewed, at most: a scan
// that starts with them must not see them expire halfway.
const renewBefore = 5 * time.Minute

// cacheKey is one identity's login at one registry.
type cacheKey struct {
	provider, identity, registry string
}

type cached struct {
	cred    authn.AuthConfig
	renewAt time.Time
}

// cache holds registry credentials until shortly before they expire, at most max of them.
type cache struct {
	mu      sync.Mutex
	max     int
	entries map[cacheKey]cached
}

func newCache(max int) *cache {
	return &cache{max: max, entries: map[cacheKey]cached{}}
}

func (c *cache) get(k cacheKey, now time.Time) (authn.AuthConfig, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !now.Before(e.renewAt) {
		return authn.AuthConfig{}, false
	}
	return e.cred, true
}

// put stores credentials obtained at now that expire at expires; credentials without a known
// expiry (zero) are not kept. The renewal comes a fifth of their lifetime early, at most
// renewBefore.
func (c *cache) put(k cacheKey, cred authn.AuthConfig, now, expires time.Time) {
	if expires.IsZero() {
		return
	}
	renewAt := expires.Add(-min(renewBefore, expires.Sub(now)/5))
	if !now.Before(renewAt) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.max {
		c.evict(now)
	}
	c.entries[k] = cached{cred: cred, renewAt: renewAt}
}

// evict makes room: it drops what is due for renewal, and if that frees nothing, the entry due
// soonest.
func (c *cache) evict(now time.Time) {
	var (
		soonest cacheKey
		at      time.Time
	)
	for k, e := range c.entries {
		if !now.Before(e.renewAt) {
			delete(c.entries, k)
			continue
		}
		if at.IsZero() || e.renewAt.Before(at) {
			soonest, at = k, e.renewAt
		}
	}
	if len(c.entries) >= c.max {
		delete(c.entries, soonest)
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
