package receiver

import (
	"container/list"
	"sync"
	"time"
)

// dedup remembers delivery keys for a window, so that a sender's retry (or a replay) of a
// delivery that already succeeded changes nothing. A delivery is claimed before it is handled
// and released when handling fails, so that the retry of a failure is not dropped. Keys are of
// bounded length (see bodyKey), at most size are held, and each is forgotten when its window
// ends: the list is in claim order and every claim drops the expired ones at its old end.
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
	for d.order.Len() > 0 && !now.Before(d.order.Back().Value.(*dedupEntry).expires) {
		oldest := d.order.Back()
		d.order.Remove(oldest)
		delete(d.index, oldest.Value.(*dedupEntry).key)
	}
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
