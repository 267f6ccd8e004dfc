package signature

import "time"

// SetTUFClock makes r read the time from now, so that a test can move past the trusted root's
// validity without waiting for it.
func SetTUFClock(r *TUFRoot, now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
}
