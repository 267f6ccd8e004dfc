package store

import (
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
)

// Store is the tag store in one directory. It is safe for concurrent use;
// create one per directory and process and share it, so that concurrent
// calls share one open database.
type Store struct {
	dir  string
	opts options
	// done is closed by Close to stop a caller waiting for the directory.
	done chan struct{}
	// timer fires when the open database may have been idle for the
	// linger, or minHold has passed; it runs look.
	timer *time.Timer

	mu sync.Mutex
	// changed is closed and replaced when a waiting call or Close may be
	// able to proceed.
	changed chan struct{}
	state   state
	db      *badger.DB
	gate    *gate
	// rings hears waiting processes at the gate; set up by the first open.
	rings *rings
	users int
	// opened is when the database was opened, idleSince when the last call
	// ended; the linger counts from it.
	opened, idleSince time.Time
	// draining admits no new calls: the database closes when the calls in
	// flight end.
	draining bool
	wrote    bool
	closed   bool
	closeErr error
	// flushing is set while a background flush runs, flushAgain when a
	// write committed during it (flushSoon).
	flushing, flushAgain bool
	// opens counts successful opens, for tests.
	opens int
	// proofKey is the directory's key, once read (ProofKey).
	proofKey []byte
	// compacting holds the keys whose deltas are being compacted (compactSoon).
	compacting map[string]bool

	// written counts the bytes of keys and values that committed writes set,
	// compacted those of compactions and sweeps (count).
	written, compacted atomic.Int64
}

// count counts n bytes of keys and values that a committed write set, in the Store and in the
// process's metrics, by cause: metrics.StoreWriteListing, StoreWritePush or
// StoreWriteCompaction (also a sweep).
func (s *Store) count(n int, cause string) {
	if n == 0 {
		return
	}
	s.written.Add(int64(n))
	if cause == metrics.StoreWriteCompaction {
		s.compacted.Add(int64(n))
	}
	metrics.RecordStoreWritten(n, cause)
}

// state is where the Store is in the life of one open database.
type state int

const (
	stateIdle state = iota
	stateOpening
	stateOpen
	stateClosing
)

// New returns a Store for the Badger directory dir, creating it on first
// use. It does not open the directory: each call does, when needed.
func New(dir string, opts ...Option) *Store {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	s := &Store{
		dir:     dir,
		opts:    makeOptions(opts),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	s.timer = time.AfterFunc(time.Hour, s.lookNow)
	s.timer.Stop()
	return s
}

// Close makes further calls fail with ErrClosed, waits for the calls in
// flight and closes the database cleanly, so that the next process needs no
// log replay. Closing a closed Store does nothing.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
		s.look(false)
	}
	for s.state != stateIdle {
		ch := s.changed
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	if s.rings != nil {
		s.rings.stop()
		s.rings = nil
	}
	err := s.closeErr
	s.closeErr = nil
	return err
}

// broadcast tells waiters that the state changed; s.mu must be held.
func (s *Store) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}
