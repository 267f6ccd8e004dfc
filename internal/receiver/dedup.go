package receiver

import (
	"crypto/sha256"
	"sync"
	"time"
)

// dedup remembers delivery keys for a window, so that a sender's retry (or a replay) of a
// delivery that already succeeded changes nothing. A delivery is claimed before it is handled
// and released when handling fails, so that the retry of a failure is not dropped. At most size
// keys are held, and each is forgotten when its window ends: the keys are queued in claim order
// and every claim drops the expired ones at the queue's old end.
//
// A key is held as its SHA-256 with when it expires, 40 bytes in the index and 40 in the queue,
// whatever the key's length; after a burst the index and the queue are rebuilt at the size of
// what they still hold, since a Go map keeps the room it once grew to.
type dedup struct {
	window time.Duration
	size   int

	mu sync.Mutex
	// index maps a held key's hash to when it expires (Unix nanoseconds).
	index map[[sha256.Size]byte]int64
	// order holds the claims from order[head] on, oldest first. A claim whose key index no
	// longer holds with the same expiry (released, or claimed again later) is stale: it is
	// skipped, and left out when order is rebuilt.
	order []dedupEntry
	head  int
	// peak is the most keys index held since it was last rebuilt.
	peak int
}

type dedupEntry struct {
	key     [sha256.Size]byte
	expires int64
}

// dedupCompactMin is the least number of dropped claims or held keys below the peak that makes
// claim rebuild the queue or the index.
const dedupCompactMin = 256

func newDedup(window time.Duration, size int) *dedup {
	return &dedup{window: window, size: max(size, 1), index: map[[sha256.Size]byte]int64{}}
}

// claim reports whether key is new within the window, and remembers it.
func (d *dedup) claim(key string, now time.Time) bool {
	if d.window <= 0 || key == "" {
		return true
	}
	h := sha256.Sum256([]byte(key))
	at := now.UnixNano()
	d.mu.Lock()
	defer d.mu.Unlock()
	if expires, ok := d.index[h]; ok && at < expires {
		return false
	}
	expires := now.Add(d.window).UnixNano()
	d.index[h] = expires
	d.order = append(d.order, dedupEntry{key: h, expires: expires})
	d.peak = max(d.peak, len(d.index))
	for d.head < len(d.order) {
		e := d.order[d.head]
		if held, ok := d.index[e.key]; ok && held == e.expires {
			if at < e.expires && len(d.index) <= d.size {
				break
			}
			delete(d.index, e.key)
		}
		d.order[d.head] = dedupEntry{}
		d.head++
	}
	d.compact()
	return true
}

// release forgets key, so that a retry of a delivery that failed is handled again.
func (d *dedup) release(key string) {
	h := sha256.Sum256([]byte(key))
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.index, h)
}

// held is the number of keys remembered.
func (d *dedup) held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.index)
}

// compact rebuilds the queue once most of it is dropped or stale, and the index once it holds
// a quarter of its peak. The caller holds d.mu.
func (d *dedup) compact() {
	if live := len(d.order) - d.head; d.head >= dedupCompactMin && d.head > live {
		order := make([]dedupEntry, 0, live)
		for _, e := range d.order[d.head:] {
			if held, ok := d.index[e.key]; ok && held == e.expires {
				order = append(order, e)
			}
		}
		d.order, d.head = order, 0
	}
	if d.peak >= dedupCompactMin && len(d.index) < d.peak/4 {
		index := make(map[[sha256.Size]byte]int64, len(d.index))
		for k, v := range d.index {
			index[k] = v
		}
		d.index, d.peak = index, len(index)
	}
}
