package store

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
)

// minHold is how long a holder keeps the directory for its own calls before
// it gives way to a waiting process. A hand-over costs a Badger close and
// open (10-40 ms for a writer); giving way at once leaves two busy writers
// one call per hand-over each.
const minHold = 5 * time.Millisecond

// acquire returns the open database, opening it when needed. The caller
// must call release when done with it.
func (s *Store) acquire(ctx context.Context, write bool) (*badger.DB, error) {
	if write && s.opts.readOnly {
		return nil, fmt.Errorf("tag store %s: %w", s.dir, ErrReadOnly)
	}
	start := time.Now()
	s.mu.Lock()
	for {
		if s.closed {
			s.look(false) // an open that ended after Close
			s.mu.Unlock()
			return nil, fmt.Errorf("tag store %s: %w", s.dir, ErrClosed)
		}
		switch {
		case s.state == stateOpen && !s.draining:
			s.users++
			s.wrote = s.wrote || write
			db := s.db
			s.mu.Unlock()
			metrics.RecordStoreWait(write, time.Since(start))
			return db, nil
		case s.state == stateIdle:
			s.state = stateOpening
			s.mu.Unlock()
			db, g, err := s.open(ctx, start)
			s.mu.Lock()
			if err != nil {
				s.state = stateIdle
				s.broadcast()
				s.mu.Unlock()
				return nil, err
			}
			s.db, s.gate, s.state = db, g, stateOpen
			s.users, s.draining, s.wrote = 0, false, false
			s.opened = time.Now()
			s.idleSince = s.opened
			s.opens++
			if s.rings == nil {
				s.rings = listen(filepath.Join(s.dir, gateFile), s.lookNow, s.opts.logger)
			}
			s.broadcast()
			continue
		}
		// Opening, closing or draining: wait for the state to change.
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, s.lockedError(ctx, start)
		}
		s.mu.Lock()
	}
}

// release ends one call's use of the database.
func (s *Store) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users--
	if s.users == 0 {
		s.idleSince = time.Now()
		// A waiter's ring makes the holder probe the gate; without the
		// rings, the end of the last call does.
		s.look(s.rings.f == nil)
	}
}

// lookNow is look for callers that do not hold s.mu, with a probe of the
// gate: the gate's rings and the timer.
func (s *Store) lookNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.look(true)
}

// look decides about the open database; s.mu must be held. It runs when a
// waiting process rings the gate, when the last call in flight ends, when
// the linger or minHold may have run out, and on a hand-over and Close. With
// probe, it checks the gate: the database stops admitting calls once another
// process waits for it (after minHold). It closes when no call is in flight
// and the Store is closed, draining, or idle for the linger.
func (s *Store) look(probe bool) {
	if s.state != stateOpen {
		return
	}
	held := time.Since(s.opened)
	if probe && !s.draining && held >= minHold && s.gate.waiting(!s.opts.readOnly) {
		// Calls arriving from now on wait for the next open, which goes
		// through the gate after the waiter.
		s.draining = true
	}
	if s.users > 0 {
		return
	}
	if idle := time.Since(s.idleSince); !s.draining && !s.closed && idle < s.opts.linger {
		next := s.opts.linger - idle
		if held < minHold {
			// A ring heard before minHold was passed over: look again then.
			next = min(next, minHold-held)
		}
		s.timer.Reset(next)
		return
	}
	s.state = stateClosing
	s.timer.Stop()
	s.broadcast()
	// Tidying waits for nobody: not on shutdown, and when another process
	// waits only once the value log is overdue for it, since a writer that
	// always hands over to a reader would never tidy.
	db, g, tidy, urgent := s.db, s.gate, s.wrote && !s.closed, s.draining
	go func() {
		err := s.closeDB(db, g, tidy, urgent)
		s.mu.Lock()
		s.db, s.gate, s.state = nil, nil, stateIdle
		if s.closed {
			s.closeErr = err
		}
		s.broadcast()
		s.mu.Unlock()
		if s.opts.afterClose != nil {
			s.opts.afterClose()
		}
	}()
}

// closeDB closes a database, first tidying the value log if asked to;
// urgent tidying, while another process waits, only when it is overdue.
func (s *Store) closeDB(db *badger.DB, g *gate, tidy, urgent bool) error {
	if tidy && (!urgent || valueLogFiles(s.dir) > 2*maxValueLogFiles) {
		s.tidy(db, g, urgent)
	}
	err := db.Close()
	g.close()
	if err != nil {
		s.opts.logger.Warn("closing the tag store", "dir", s.dir, "error", err)
		return fmt.Errorf("tag store %s: closing: %w", s.dir, err)
	}
	return nil
}

// lockedError explains a wait that the caller's context ended.
func (s *Store) lockedError(ctx context.Context, start time.Time) error {
	return fmt.Errorf("tag store %s: %w (waited %s): %w",
		s.dir, ErrLocked, time.Since(start).Round(time.Millisecond), context.Cause(ctx))
}
