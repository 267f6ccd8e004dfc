package receiver

import (
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
)

// Defaults of the options.
const (
	// DefaultRate and DefaultBurst are each receiver's token bucket: a registry that sends more
	// is answered 429 and retries later.
	DefaultRate  = 10
	DefaultBurst = 50
	// DefaultUnauthenticatedRate and DefaultUnauthenticatedBurst are each remote address's
	// token bucket of deliveries that fail authentication, checked before the body is read:
	// once it is spent, a delivery is answered 429 at the cost of its headers, without a read
	// or an HMAC. Only failed deliveries are charged, so a sender with the right token never
	// spends it.
	DefaultUnauthenticatedRate  = 5
	DefaultUnauthenticatedBurst = 20
	// DefaultSenderLimits bounds the remote addresses and CloudEvents senders whose buckets are
	// held at once.
	DefaultSenderLimits = 10000
	// DefaultDedupWindow is how long a delivery id is remembered.
	DefaultDedupWindow = 10 * time.Minute
	// DefaultDedupSize bounds the deliveries remembered at once; each takes a fixed size (the
	// SHA-256 of its key and its expiry, in a map and a queue: about 125 bytes), so together
	// some 1.25 MB at most.
	DefaultDedupSize = 10000
	// DefaultSecretTTL is how long a listing of the receivers' Secrets is used: the time a new
	// or rotated token takes to apply, and the most often a flood of deliveries makes the
	// function list them.
	DefaultSecretTTL = 10 * time.Second
	// DefaultPageSize is the limit of each ImageRepository list call.
	DefaultPageSize = kube.DefaultPageSize
	// MaxBodyBytes is the largest webhook body accepted (413 above it).
	MaxBodyBytes = 1 << 20
)

// SecretName is the Secret that holds a namespaced receiver's token, under SecretKey.
const (
	SecretName = "reflector-webhook"
	SecretKey  = "token"
)

// Option configures New.
type Option func(*config)

type config struct {
	clusterSecret []byte
	rate          rate.Limit
	burst         int
	unauthRate    rate.Limit
	unauthBurst   int
	dedupWindow   time.Duration
	dedupSize     int
	secretTTL     time.Duration
	pageSize      int64
	repositories  reconcile.CachedRepositories
	log           *slog.Logger
	now           func() time.Time
}

func defaults() config {
	return config{
		rate:        DefaultRate,
		burst:       DefaultBurst,
		unauthRate:  DefaultUnauthenticatedRate,
		unauthBurst: DefaultUnauthenticatedBurst,
		dedupWindow: DefaultDedupWindow,
		dedupSize:   DefaultDedupSize,
		secretTTL:   DefaultSecretTTL,
		pageSize:    DefaultPageSize,
		log:         slog.Default(),
		now:         time.Now,
	}
}

// WithClusterSecret enables the cluster receiver, /hook/<provider>, authenticated with secret.
// Without it (or with an empty secret) the cluster receiver does not exist and answers 404.
func WithClusterSecret(secret []byte) Option {
	return func(c *config) { c.clusterSecret = secret }
}

// WithRateLimit sets each receiver's token bucket: perSecond authenticated deliveries per
// second with bursts of burst. rate.Inf disables the limit.
func WithRateLimit(perSecond rate.Limit, burst int) Option {
	return func(c *config) { c.rate, c.burst = perSecond, burst }
}

// WithUnauthenticatedLimit sets each remote address's token bucket of webhook deliveries that
// fail authentication: perSecond with bursts of burst, checked before the body is read. Behind a
// proxy (Knative's ingress and queue-proxy) every delivery comes from the proxy's address, so
// the bucket bounds the cost of all unauthenticated deliveries together. rate.Inf disables it.
func WithUnauthenticatedLimit(perSecond rate.Limit, burst int) Option {
	return func(c *config) { c.unauthRate, c.unauthBurst = perSecond, burst }
}

// WithDedup sets how long delivery ids are remembered and how many at most; a window of zero
// remembers none.
func WithDedup(window time.Duration, size int) Option {
	return func(c *config) { c.dedupWindow, c.dedupSize = window, size }
}

// WithSecretTTL sets how long a listing of the receivers' Secrets is used: the time a new or
// rotated token takes to apply.
func WithSecretTTL(d time.Duration) Option {
	return func(c *config) { c.secretTTL = d }
}

// WithPageSize sets the limit of each list call, of ImageRepositories and of receiver Secrets.
func WithPageSize(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.pageSize = n
		}
	}
}

// WithRepositories makes matching take the ImageRepositories from the watched copies
// (kube.Cache) instead of listing them, once the copies can answer. A delivery that matches
// nothing there is still checked against a consistent listing.
func WithRepositories(c reconcile.CachedRepositories) Option {
	return func(cfg *config) { cfg.repositories = c }
}

// WithLogger sets where the one line per answer goes; the default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithClock sets the clock of reconcile-request tokens, caches and due decisions.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}
