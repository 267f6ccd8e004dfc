// Package registry lists the tags of an ImageRepository's image and resolves tag digests, with
// the access options of Flux's image.toolkit.fluxcd.io/v1 API (dockerconfigjson Secrets, a
// ServiceAccount's image pull secrets, the cloud logins of spec.provider through
// internal/cloudauth, a private CA, client certificates, a proxy, plain HTTP)
// and without tripping registry rate limits: a token bucket per registry host shared by every
// scan of the process, Retry-After honoured on 429, backoff with jitter on server errors, all
// inside the object's timeout.
//
// A scan is Prepare (Secrets read, one /v2/ ping), then ListTags and any number of Head calls
// through the same authenticated transport.
package registry

import (
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/cloudauth"
	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/metrics"
)

// Defaults of a Client made without options.
const (
	// DefaultRate is the sustained number of requests per second sent to one registry host.
	DefaultRate = 10
	// DefaultBurst is how many requests to one host may go out at once after a quiet period.
	DefaultBurst = 10
	// DefaultPageSize is the number of tags asked for per page; ECR refuses more than 1000.
	DefaultPageSize = 1000
	// DefaultMaxTags is the number of tags above which a repository is reported, not stored.
	DefaultMaxTags = 200_000
	// DefaultMaxRetries is how many times one request is retried after a 429, a 5xx or a
	// network error, deadline permitting.
	DefaultMaxRetries = 5
	// DefaultInitialBackoff is the wait before the first retry of a request without Retry-After.
	DefaultInitialBackoff = 500 * time.Millisecond
	// DefaultMaxBackoff bounds the wait between two retries without Retry-After.
	DefaultMaxBackoff = 30 * time.Second
)

// userAgent identifies reflector to registries, which some use to attribute rate limits.
const userAgent = "reflector"

// Client scans registries. It holds what all scans of a process share: the per-host rate
// limiters and, for scans that need no TLS or proxy settings of their own, the connection pool.
// A Client is safe for concurrent use; make one per process.
type Client struct {
	base           *http.Transport
	rate           rate.Limit
	burst          int
	pageSize       int
	maxTags        int
	maxRetries     int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	cloud          *cloudauth.Authenticator
	sessions       *sessions
	guard          *egress.Guard

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

// maxLimiters bounds the token buckets kept, one per registry host that objects name: any
// tenant may name any host. A bucket that is full again is the same as a new one, so those go
// first when the bound is reached.
const maxLimiters = 4096

// New returns a Client configured by opts.
func New(opts ...Option) *Client {
	c := &Client{
		rate:           DefaultRate,
		burst:          DefaultBurst,
		pageSize:       DefaultPageSize,
		maxTags:        DefaultMaxTags,
		maxRetries:     DefaultMaxRetries,
		initialBackoff: DefaultInitialBackoff,
		maxBackoff:     DefaultMaxBackoff,
		limiters:       map[string]*rate.Limiter{},
		sessions:       &sessions{ttl: DefaultSessionTTL},
	}
	for _, o := range opts {
		o(c)
	}
	if c.cloud == nil {
		c.cloud = cloudauth.New()
	}
	if c.guard == nil {
		c.guard = egress.Default()
	}
	if c.base == nil {
		// go-containerregistry's defaults, dialled by the guard's own dialer, which checks the
		// address of each socket once more as it connects.
		c.base = remote.DefaultTransport.(*http.Transport).Clone()
		c.base.DialContext = nil
	}
	c.base = c.guard.Transport(c.base)
	return c
}

// limiter returns the token bucket of a registry host, creating it on first use. The host is
// the one an object names, never one its registry redirects to, so that no registry can make a
// scan spend other hosts' buckets or grow their number.
func (c *Client) limiter(host string) *rate.Limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.limiters[host]
	if !ok {
		if len(c.limiters) >= maxLimiters {
			c.evictLimiters()
		}
		l = rate.NewLimiter(c.rate, c.burst)
		c.limiters[host] = l
		metrics.SetRegistryLimiters(len(c.limiters))
	}
	return l
}

// evictLimiters makes room for a new bucket: the full ones go, and when none is full, an
// arbitrary one, which then starts again full. The caller holds c.mu.
func (c *Client) evictLimiters() {
	now := time.Now()
	for h, l := range c.limiters {
		if l.TokensAt(now) >= float64(c.burst) {
			delete(c.limiters, h)
		}
	}
	for h := range c.limiters {
		if len(c.limiters) < maxLimiters {
			break
		}
		delete(c.limiters, h)
	}
}

// ListingRequests is the number of requests ListTags makes for a repository of tags tags: one
// per page of the Client's page size, and at least one. A registry that refuses the page size
// answers with smaller pages and more requests.
func (c *Client) ListingRequests(tags int) int {
	return max(1, (tags+c.pageSize-1)/c.pageSize)
}
