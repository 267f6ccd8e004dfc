package store

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// open opens the directory for this Store's mode, waiting through the gate
// while another process holds it.
func (s *Store) open(ctx context.Context, start time.Time) (*badger.DB, *gate, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("tag store %s: %w", s.dir, err)
	}
	g := openGate(s.dir)
	db, err := s.openThroughGate(ctx, g, &backoff{}, start)
	if err != nil {
		g.close()
		return nil, nil, err
	}
	return db, g, nil
}

// openThroughGate announces this process at the gate and retries the open
// until it succeeds, fails for a reason other than the lock, or the wait ends.
func (s *Store) openThroughGate(ctx context.Context, g *gate, bo *backoff, start time.Time) (*badger.DB, error) {
	write := !s.opts.readOnly
	entered := false
	defer func() {
		if entered {
			g.leave()
		}
	}()
	for {
		if !entered {
			entered = g.enter(write)
		}
		if entered {
			db, err := s.openOnce(write)
			if err == nil || !isLocked(err) {
				return db, err
			}
		}
		t := time.NewTimer(bo.next())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, s.lockedError(ctx, start)
		case <-s.done:
			t.Stop()
			return nil, fmt.Errorf("tag store %s: %w", s.dir, ErrClosed)
		}
	}
}

// openOnce tries one open. A reader that finds the log of a writer that died
// without closing, or no store at all, needs one read-write open first:
// Badger replays (or creates) the log only then.
func (s *Store) openOnce(write bool) (*badger.DB, error) {
	db, err := badger.Open(s.badgerOptions(!write))
	if err == nil || isLocked(err) {
		return db, err
	}
	if !write && needsWriter(err) {
		rw, err := badger.Open(s.badgerOptions(false))
		if err != nil {
			if isLocked(err) {
				return nil, err
			}
			return nil, s.unreadable(err)
		}
		if err := rw.Close(); err != nil {
			return nil, s.unreadable(err)
		}
		s.opts.logger.Warn("replayed the log of a writer that did not close the tag store", "dir", s.dir)
		db, err = badger.Open(s.badgerOptions(true))
		if err == nil || isLocked(err) {
			return db, err
		}
	}
	return nil, s.unreadable(err)
}

// unreadable reports a directory Badger cannot open for a reason other than
// the lock.
func (s *Store) unreadable(cause error) error {
	return fmt.Errorf("tag store %s: %w: %v", s.dir, ErrCorrupt, cause)
}

// Badger formats its errors with %v, so they can only be recognised by text.

// isLocked reports Badger's failure to take the directory lock.
func isLocked(err error) bool {
	return strings.Contains(err.Error(), "Cannot acquire directory lock")
}

// needsWriter reports the read-only opens that one read-write open fixes.
func needsWriter(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Log truncate required") ||
		strings.Contains(msg, "no manifest found")
}
