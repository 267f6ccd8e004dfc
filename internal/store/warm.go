package store

import (
	"context"
	"time"
)

// warmTimeout bounds the background open of Warm.
const warmTimeout = 10 * time.Second

// Warm opens the directory in the background when it is not open, so that a call that follows
// soon finds it open rather than waiting for Badger's open: for a caller that knows one is
// coming, such as the scan function while it records the reconcile request of a push it is
// about to scan. The open then lasts the linger, like any other. Without a call following, it
// costs one open and close.
func (s *Store) Warm() {
	s.mu.Lock()
	idle := s.state == stateIdle && !s.closed
	s.mu.Unlock()
	if !idle {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		defer cancel()
		if _, err := s.acquire(ctx, false); err == nil {
			s.release()
		}
	}()
}
