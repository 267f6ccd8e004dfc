package receiver

import (
	"sync"

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
