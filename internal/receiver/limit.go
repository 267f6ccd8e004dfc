package receiver

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiters holds one token bucket per receiver. Buckets are created only for authenticated
// deliveries, so their number is bounded by the receivers that exist.
type limiters struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newLimiters(r rate.Limit, burst int) *limiters {
	return &limiters{rate: r, burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token from receiver's bucket.
func (l *limiters) allow(receiver string) bool {
	if l.rate == rate.Inf {
		return true
	}
	l.mu.Lock()
	b, ok := l.buckets[receiver]
	if !ok {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[receiver] = b
	}
	l.mu.Unlock()
	return b.Allow()
}

// addressLimits holds a token bucket per key for keys a sender chooses (its address, its
// ServiceAccount), at most size of them: when full, the buckets that have refilled are dropped,
// and if none has, all are, so that memory stays bounded whatever the senders. A dropped bucket
// starts again full, which costs at most a burst per key.
type addressLimits struct {
	rate  float64
	burst float64
	size  int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

// bucket is a token bucket that can be charged after the fact and go into debt, which
// rate.Limiter cannot.
type bucket struct {
	tokens float64
	at     time.Time
}

func newAddressLimits(r rate.Limit, burst, size int, now func() time.Time) *addressLimits {
	return &addressLimits{rate: float64(r), burst: float64(burst), size: max(size, 1), now: now, buckets: map[string]*bucket{}}
}

// refill brings b's tokens up to now; the caller holds l.mu.
func (l *addressLimits) refill(b *bucket, now time.Time) {
	if elapsed := now.Sub(b.at).Seconds(); elapsed > 0 {
		b.tokens = min(l.burst, b.tokens+elapsed*l.rate)
	}
	b.at = now
}

// take takes a token from key's bucket and reports whether there was one.
func (l *addressLimits) take(key string) bool {
	if l.rate >= float64(rate.Inf) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// allow reports whether key's bucket holds a token, without taking it: the caller charges it
// afterwards, if the request turns out to count.
func (l *addressLimits) allow(key string) bool {
	if l.rate >= float64(rate.Inf) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bucket(key).tokens >= 1
}

// charge takes a token from key's bucket after the fact. Requests that allow let through at
// once may take more than it holds: the bucket then owes them, and allows nothing until it
// has refilled past the debt, so that concurrency buys a sender nothing.
func (l *addressLimits) charge(key string) {
	if l.rate >= float64(rate.Inf) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bucket(key).tokens--
}

// bucket returns key's bucket refilled up to now, creating it full; the caller holds l.mu.
func (l *addressLimits) bucket(key string) *bucket {
	now := l.now()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.size {
			l.evict(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	l.refill(b, now)
	return b
}

// evict drops the buckets that are full again, or all when none is; the caller holds l.mu.
func (l *addressLimits) evict(now time.Time) {
	for k, b := range l.buckets {
		if l.refill(b, now); b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= l.size {
		clear(l.buckets)
	}
}
