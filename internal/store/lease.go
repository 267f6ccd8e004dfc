package store

import (
	"context"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
)

// watchInterval is how often an open database probes the gate for waiting
// processes and checks the end of its linger. It is a poll because flock
// tells nobody about a lock that another process failed to take. It adds up
// to its own length to every hand-over: in BenchmarkHandover a writer's p50
// wait was the same at 1 ms and 5 ms (33-38 ms) and about 10 ms longer at
// 20 ms (42-47 ms); 5 ms costs a fifth of the probes of 1 ms.
const watchInterval = 5 * time.Millisecond

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
			s.idleSince = time.Now()
			s.opens++
			s.broadcast()
			go s.watch(db, g)
			continue
		}
		// Opening, closing or draining: wait for the state to change.
		ch := s.changed
		s.waiters++
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			s.waiters--
			s.mu.Unlock()
			return nil, s.lockedError(ctx, start)
		}
		s.mu.Lock()
		s.waiters--
	}
}

// release ends one call's use of the database.
func (s *Store) release() {
	s.mu.Lock()
	s.users--
	if s.users == 0 {
		s.idleSince = time.Now()
		if s.waiters > 0 {
			s.broadcast()
		}
		if s.draining || s.closed {
			s.wake()
		}
	}
	s.mu.Unlock()
}

// watch closes db when it has been idle for the linger, when another process
// waits for the directory, or when the Store is closed.
func (s *Store) watch(db *badger.DB, g *gate) {
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	write := !s.opts.readOnly
	for {
		select {
		case <-tick.C:
		case <-s.kick:
		}
		s.mu.Lock()
		if !s.draining && g.waiting(write) {
			// Calls arriving from now on wait for the next open, which goes
			// through the gate after the waiter.
			s.draining = true
		}
		if s.users > 0 {
			s.mu.Unlock()
			continue
		}
		yield := s.draining || s.closed
		if !yield && time.Since(s.idleSince) < s.opts.linger {
			s.mu.Unlock()
			continue
		}
		s.state = stateClosing
		s.broadcast()
		// Tidying waits for nobody: not on shutdown, and when another
		// process waits only once the value log is overdue for it, since
		// a writer that always hands over to a reader would never tidy.
		tidy := s.wrote && !s.closed
		urgent := s.draining
		s.mu.Unlock()
		if urgent {
			tidy = tidy && valueLogFiles(s.dir) > 2*maxValueLogFiles
		}

		err := s.closeDB(db, g, tidy, urgent)

		s.mu.Lock()
		s.db, s.gate, s.state = nil, nil, stateIdle
		if s.closed {
			s.closeErr = err
		}
		s.broadcast()
		s.mu.Unlock()
		return
	}
}

// closeDB closes a database, first tidying the value log if asked to;
// urgent tidying goes on while another process waits.
func (s *Store) closeDB(db *badger.DB, g *gate, tidy, urgent bool) error {
	if tidy {
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
