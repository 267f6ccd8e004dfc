package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// errRebuilt says that the directory was moved aside and the open should
// start again on a fresh one.
var errRebuilt = errors.New("tag store moved aside")

// open opens the directory for this Store's mode, waiting through the gate
// while another process holds it.
func (s *Store) open(ctx context.Context, start time.Time) (*badger.DB, *gate, error) {
	var bo backoff
	for {
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, nil, fmt.Errorf("tag store %s: %w", s.dir, err)
		}
		g := openGate(s.dir)
		db, err := s.openThroughGate(ctx, g, &bo, start)
		switch {
		case errors.Is(err, errRebuilt):
			// The gate file moved away with the old directory.
			g.close()
		case err != nil:
			g.close()
			return nil, nil, err
		default:
			return db, g, nil
		}
	}
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

// unreadable reports a directory Badger cannot open and, when the Store is
// allowed to, moves it aside so the next attempt starts empty.
func (s *Store) unreadable(cause error) error {
	if environmental(cause) {
		return fmt.Errorf("tag store %s: cannot open: %v", s.dir, cause)
	}
	err := fmt.Errorf("tag store %s: %w: %v", s.dir, ErrCorrupt, cause)
	if !s.opts.rebuild {
		return err
	}
	aside, mvErr := moveAside(s.dir)
	if mvErr != nil {
		return fmt.Errorf("%w (moving it aside failed: %v)", err, mvErr)
	}
	s.opts.logger.Warn("moved an unreadable tag store aside and started an empty one",
		"dir", s.dir, "aside", aside, "error", cause)
	return errRebuilt
}

// moveAside renames dir to a sibling with a ".corrupt-<unix nanos>" suffix,
// after removing older ones so that repeated damage cannot fill the volume.
// It takes Badger's own directory lock first, so a directory that another
// process has open is never moved.
func moveAside(dir string) (string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return "", fmt.Errorf("another process has it open: %w", err)
	}
	old, _ := filepath.Glob(dir + ".corrupt-*")
	for _, o := range old {
		_ = os.RemoveAll(o)
	}
	aside := fmt.Sprintf("%s.corrupt-%d", dir, time.Now().UnixNano())
	if err := os.Rename(dir, aside); err != nil {
		return "", err
	}
	return aside, nil
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

// environmental reports failures of the volume rather than of its content,
// which rebuilding would not fix.
func environmental(err error) bool {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EACCES, syscall.EPERM,
		syscall.EROFS, syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.EIO} {
		if errors.Is(err, errno) || strings.Contains(err.Error(), errno.Error()) {
			return true
		}
	}
	return false
}
