package receiver

import (
	"container/list"
	"sync"
	"time"
)

// dedup remembers delivery ids for a window, in a bounded LRU, so that a sender's retry of a
// delivery that already succeeded changes nothing. A delivery is claimed before it is handled
// and released when handling fails, so that the retry of a failure is not dropped.
type dedup struct {
	window time.Duration
	size   int

	mu    sync.Mutex
	order *list.List // of *dedupEntry, most recent first
	index map[string]*list.Element
}

type dedupEntry struct {
	key     string
	expires time.Time
}

func newDedup(window time.Duration, size int) *dedup {
	return &dedup{window: window, size: max(size, 1), order: list.New(), index: map[string]*list.Element{}}
}

// claim reports whether key is new within the window, and remembers it.
func (d *dedup) claim(key string, now time.Time) bool {
	if d.window <= 0 || key == "" {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if el, ok := d.index[key]; ok {
		if now.Before(el.Value.(*dedupEntry).expires) {
			return false
		}
		d.order.Remove(el)
		delete(d.index, key)
	}
	d.index[key] = d.order.PushFront(&dedupEntry{key: key, expires: now.Add(d.window)})
	for d.order.Len() > d.size {
		oldest := d.order.Back()
		d.order.Remove(oldest)
		delete(d.index, oldest.Value.(*dedupEntry).key)
	}
	return true
}

// release forgets key, so that a retry of a delivery that failed is handled again.
func (d *dedup) release(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if el, ok := d.index[key]; ok {
		d.order.Remove(el)
		delete(d.index, key)
	}
}
