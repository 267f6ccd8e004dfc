package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
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
			g.ring()
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
// Badger replays (or creates) the log only then. A writer opens only while
// the volume has room for what the session may write (see room), and sets a
// damaged directory aside (see rebuild); a reader reports the damage and
// leaves the repair to the next writer, which alone may move files that
// readers may be about to open.
func (s *Store) openOnce(write bool) (*badger.DB, error) {
	if !write && !exists(filepath.Join(s.dir, badger.ManifestFilename)) {
		if err := s.replay(); err != nil {
			return nil, err
		}
	}
	if write {
		if err := s.room(0); err != nil {
			return nil, err
		}
	}
	db, err := s.openBadger(!write)
	if err == nil || isLocked(err) {
		return db, err
	}
	if !write && needsReplay(err) {
		if err := s.replay(); err != nil {
			return nil, err
		}
		db, err = s.openBadger(true)
		if err == nil || isLocked(err) {
			return db, err
		}
	}
	err = s.classify(err)
	if !damaged(err) {
		return nil, err
	}
	if write {
		return s.rebuild(err)
	}
	metrics.RecordStoreDamage(metrics.StoreDamageReported)
	return nil, err
}

// openBadger opens the directory with Badger once its tables passed checkTables.
func (s *Store) openBadger(readOnly bool) (*badger.DB, error) {
	if err := s.checkTables(readOnly); err != nil {
		return nil, err
	}
	return badger.Open(s.badgerOptions(readOnly))
}

// replay opens the directory read-write once and closes it, which makes
// Badger create a missing store or replay a log left by a writer that died.
func (s *Store) replay() error {
	if err := s.room(0); err != nil {
		return err
	}
	rw, err := s.openBadger(false)
	if err != nil {
		if isLocked(err) {
			return err
		}
		err = s.classify(err)
		if damaged(err) {
			metrics.RecordStoreDamage(metrics.StoreDamageReported)
		}
		return err
	}
	if err := rw.Close(); err != nil {
		return s.classify(err)
	}
	s.opts.logger.Warn("opened the tag store read-write once for a reader", "dir", s.dir)
	return nil
}

// unreadable reports a directory, or a value, that Badger cannot read
// because of what it holds.
func (s *Store) unreadable(cause error) error {
	return fmt.Errorf("tag store %s: %w: %s", s.dir, ErrCorrupt, bounded(cause.Error()))
}

// exists reports whether path may exist; only "does not exist" says no.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// Badger wraps errors with y.Wrapf, which outside its debug build formats
// the cause with %+v instead of wrapping it, so errors.Is cannot see the
// cause and these two are recognised by text.

// isLocked reports Badger's failure to take the directory lock, formatted by
// acquireDirectoryLock (dir_unix.go).
func isLocked(err error) bool {
	return strings.Contains(err.Error(), "Cannot acquire directory lock")
}

// needsReplay reports badger.ErrTruncateNeeded, which a read-only open of a
// log left by a writer that died gets from (*memTable).UpdateSkipList,
// wrapped by openMemTable and Open.
func needsReplay(err error) bool {
	return errors.Is(err, badger.ErrTruncateNeeded) ||
		strings.Contains(err.Error(), badger.ErrTruncateNeeded.Error())
}
