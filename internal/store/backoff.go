package store

import (
	"math/rand/v2"
	"time"
)

// Retry delays while another process holds the directory. The cap bounds
// how late a waiter notices that the directory became free.
const (
	minBackoff = time.Millisecond
	maxBackoff = 10 * time.Millisecond
)

// backoff yields exponentially growing delays with jitter, so that
// processes waiting for the same directory do not retry in step.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, minBackoff), maxBackoff)
	return b.d/2 + rand.N(b.d/2+1)
}
