package registry

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/cloudauth"
	"github.com/imagereflector/reflector/internal/egress"
)

// Option configures a Client.
type Option func(*Client)

// WithRateLimit sets the token bucket of every registry host: perSecond requests per second on
// average, at most burst at once. Zero, a negative number or math.Inf(1) disables limiting.
func WithRateLimit(perSecond float64, burst int) Option {
	return func(c *Client) {
		c.rate = rate.Limit(perSecond)
		if perSecond <= 0 {
			c.rate = rate.Inf
		}
		c.burst = max(burst, 1)
	}
}

// RateLimitFromEnv returns the WithRateLimit of REFLECTOR_REGISTRY_RATE (requests per second to
// one registry host; 0: no limit) and REFLECTOR_REGISTRY_BURST, either of which alone keeps the
// other's default (DefaultRate, DefaultBurst), or no option when neither is set.
func RateLimitFromEnv() ([]Option, error) {
	s, b := os.Getenv("REFLECTOR_REGISTRY_RATE"), os.Getenv("REFLECTOR_REGISTRY_BURST")
	if s == "" && b == "" {
		return nil, nil
	}
	perSecond, burst := float64(DefaultRate), DefaultBurst
	var err error
	if s != "" {
		if perSecond, err = strconv.ParseFloat(s, 64); err != nil {
			return nil, fmt.Errorf("REFLECTOR_REGISTRY_RATE: %w", err)
		}
	}
	if b != "" {
		if burst, err = strconv.Atoi(b); err != nil {
			return nil, fmt.Errorf("REFLECTOR_REGISTRY_BURST: %w", err)
		}
	}
	return []Option{WithRateLimit(perSecond, burst)}, nil
}

// WithPageSize sets the number of tags asked for per page. A registry that refuses it gets
// smaller pages without further configuration.
func WithPageSize(n int) Option {
	return func(c *Client) {
		if n > 0 {
			c.pageSize = n
		}
	}
}

// WithMaxTags sets the number of tags (after the exclusion list) above which ListTags fails with
// ErrTagLimit instead of holding the whole repository in memory.
func WithMaxTags(n int) Option {
	return func(c *Client) {
		if n > 0 {
			c.maxTags = n
		}
	}
}

// WithTransport sets the transport that scans start from. Scans with a certSecretRef or a
// proxySecretRef use a clone of it with their TLS and proxy settings. Its connections pass the
// Client's egress guard all the same.
func WithTransport(t *http.Transport) Option {
	return func(c *Client) {
		if t != nil {
			c.base = t
		}
	}
}

// WithEgress sets the guard of every connection a scan makes: the registry, its token
// endpoint, every redirect and page link, through a proxy too. Without it the Client uses
// egress.Default, REFLECTOR_ALLOWED_NETWORKS of the process.
func WithEgress(g *egress.Guard) Option {
	return func(c *Client) {
		if g != nil {
			c.guard = g
		}
	}
}

// WithRetries sets how often a request is retried after a 429, a 5xx or a network error, and
// the exponential backoff between retries of answers without Retry-After: initial before the
// first, doubling up to maxBackoff, each with random jitter.
func WithRetries(n int, initial, maxBackoff time.Duration) Option {
	return func(c *Client) {
		c.maxRetries = max(n, 0)
		if initial > 0 {
			c.initialBackoff = initial
		}
		c.maxBackoff = max(maxBackoff, c.initialBackoff)
	}
}

// WithCloudAuth sets how scans with spec.provider aws, azure or gcp log in; without it they use
// the scan function's own identity only, object-level workload identity disabled.
func WithCloudAuth(a *cloudauth.Authenticator) Option {
	return func(c *Client) {
		if a != nil {
			c.cloud = a
		}
	}
}

// WithSessionTTL sets how long the authenticated session of a repository is reused by later
// scans with the same credentials (DefaultSessionTTL by default); zero pings the registry at
// every scan.
func WithSessionTTL(d time.Duration) Option {
	return func(c *Client) { c.sessions = &sessions{ttl: max(d, 0)} }
}
