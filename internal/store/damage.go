package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
)

// A damaged directory is set aside inside itself: the store's directory is
// usually the mount point of its volume, which cannot be renamed. Badger
// ignores subdirectories, and the gate file stays where it is, so that the
// processes waiting at it and the inotify watches on it go on working.
const (
	// asideDir holds the one damaged copy kept for inspection; a later
	// damage replaces it, so repeated damage cannot fill the volume.
	asideDir = "reflector.damaged"
	// asideTemp is where a copy is assembled before it replaces asideDir.
	asideTemp = "reflector.damaged.tmp"
	// asideReason, inside asideDir, says when and why it was set aside.
	asideReason = "REASON"
	// rebuiltKey records in the fresh store when and why it replaced a
	// damaged one, so that readers can say why an entry is missing.
	rebuiltKey = "reflector/rebuilt"
	// maxCause bounds the cause recorded and reported for a damage.
	maxCause = 512
)

// rebuilt is the value under rebuiltKey.
type rebuilt struct {
	At    time.Time `json:"at"`
	Cause string    `json:"cause"`
}

// environmental lists the errno texts of failures that belong to the volume
// or the process rather than to what the directory holds. A directory that
// fails with one of them is reported and left alone: setting it aside would
// destroy a store that is fine, and fail again. Badger formats its causes
// into text (see isLocked), so they are recognised by text.
var environmental = []string{
	syscall.EACCES.Error(), syscall.EPERM.Error(), syscall.EROFS.Error(), syscall.EIO.Error(),
	syscall.EMFILE.Error(), syscall.ENFILE.Error(), syscall.ENOMEM.Error(), syscall.EDQUOT.Error(),
	syscall.ENODEV.Error(), syscall.ESTALE.Error(), syscall.ENOTCONN.Error(), syscall.EBUSY.Error(),
}

// classify turns a failed open that is not the lock into the store's error:
// ErrFull for a full volume, ErrUnavailable for another failure of the volume
// or the process, ErrCorrupt (damage) for everything else.
func (s *Store) classify(cause error) error {
	text := cause.Error()
	if errors.Is(cause, syscall.ENOSPC) || strings.Contains(text, syscall.ENOSPC.Error()) {
		return fmt.Errorf("tag store %s: %w: %s", s.dir, ErrFull, bounded(text))
	}
	for _, e := range environmental {
		if strings.Contains(text, e) {
			return fmt.Errorf("tag store %s: %w: %s", s.dir, ErrUnavailable, bounded(text))
		}
	}
	return s.unreadable(cause)
}

// damaged reports whether err, from classify, says the directory is damaged.
func damaged(err error) bool {
	return errors.Is(err, ErrCorrupt)
}

// rebuild sets the damaged directory aside and opens a fresh store in its
// place, recording in it why. Only a writer that holds the gate exclusively
// calls it: no other process of this store is then opening the directory or
// waiting to, and since the open failed on damage, not on the lock, none
// holds it. Badger's own directory lock is taken as well while files move,
// so that a process that shares the directory without the gate is not
// robbed of an open database.
func (s *Store) rebuild(cause error) (*badger.DB, error) {
	why := bounded(cause.Error())
	aside, err := s.setAside(why)
	if err != nil {
		metrics.RecordStoreDamage(metrics.StoreDamageReported)
		s.opts.logger.Error("the tag store is damaged and could not be set aside",
			"dir", s.dir, "damage", why, "error", err)
		return nil, fmt.Errorf("%w (setting it aside failed: %v)", s.unreadable(cause), err)
	}
	if err := s.room(0); err != nil {
		return nil, err
	}
	db, err := badger.Open(s.badgerOptions(false))
	if err != nil {
		metrics.RecordStoreDamage(metrics.StoreDamageReported)
		err = s.classify(err)
		s.opts.logger.Error("the tag store was set aside but a fresh one could not be opened",
			"dir", s.dir, "aside", aside, "damage", why, "error", err)
		return nil, err
	}
	mark, _ := json.Marshal(rebuilt{At: time.Now().UTC(), Cause: why})
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(rebuiltKey), mark) }); err != nil {
		_ = db.Close()
		return nil, s.classify(err)
	}
	metrics.RecordStoreDamage(metrics.StoreDamageRebuilt)
	s.opts.logger.Error("the tag store was damaged: set it aside and started an empty one, which the next scans fill",
		"dir", s.dir, "aside", aside, "damage", why)
	return db, nil
}

// setAside moves everything in the directory but the gate and the aside copy
// into a new aside copy, replacing the previous one, and returns its path.
// MANIFEST moves last: a process that stops half-way leaves a directory that
// still fails to open, and is set aside again.
func (s *Store) setAside(why string) (string, error) {
	d, err := os.Open(s.dir)
	if err != nil {
		return "", err
	}
	defer d.Close()
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return "", fmt.Errorf("taking the directory lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN) }()

	tmp, aside := filepath.Join(s.dir, asideTemp), filepath.Join(s.dir, asideDir)
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return "", err
	}
	var manifest bool
	for _, name := range names {
		switch name {
		case gateFile, asideDir, asideTemp:
			continue
		case badger.ManifestFilename:
			manifest = true
			continue
		}
		if err := os.Rename(filepath.Join(s.dir, name), filepath.Join(tmp, name)); err != nil {
			return "", err
		}
	}
	if manifest {
		if err := os.Rename(filepath.Join(s.dir, badger.ManifestFilename), filepath.Join(tmp, badger.ManifestFilename)); err != nil {
			return "", err
		}
	}
	reason := fmt.Sprintf("set aside at %s\n%s\n", time.Now().UTC().Format(time.RFC3339Nano), why)
	if err := os.WriteFile(filepath.Join(tmp, asideReason), []byte(reason), 0o644); err != nil {
		return "", err
	}
	if err := os.RemoveAll(aside); err != nil {
		return "", err
	}
	return aside, os.Rename(tmp, aside)
}

// dropAside removes the aside copy, as the first thing given up when the
// volume runs short; it reports whether there was one.
func (s *Store) dropAside() bool {
	aside := filepath.Join(s.dir, asideDir)
	if !exists(aside) {
		return false
	}
	if err := os.RemoveAll(aside); err != nil {
		s.opts.logger.Warn("removing the damaged copy of the tag store", "dir", s.dir, "error", err)
		return false
	}
	s.opts.logger.Warn("removed the damaged copy of the tag store to make room", "dir", s.dir, "aside", aside)
	return true
}

// readRebuilt returns the rebuild record of the store, if it replaced a
// damaged one.
func readRebuilt(txn *badger.Txn) (rebuilt, bool) {
	item, err := txn.Get([]byte(rebuiltKey))
	if err != nil {
		return rebuilt{}, false
	}
	var r rebuilt
	if item.Value(func(b []byte) error { return json.Unmarshal(b, &r) }) != nil {
		return rebuilt{}, false
	}
	return r, true
}

// bounded cuts an error text to maxCause bytes, on a rune boundary.
func bounded(s string) string {
	if len(s) <= maxCause {
		return s
	}
	cut := maxCause
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
