package store

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Store is the tag store in one directory. It is safe for concurrent use;
// create one per directory and process and share it, so that concurrent
// calls share one open database.
type Store struct {
	dir  string
	opts options
	// done is closed by Close to stop a caller waiting for the directory.
	done chan struct{}
	// kick wakes the watcher of the open database early.
	kick chan struct{}

	mu sync.Mutex
	// changed is closed and replaced when a waiting call or Close may be
	// able to proceed.
	changed chan struct{}
	// waiters counts the calls waiting on changed.
	waiters int
	state   state
	db      *badger.DB
	gate    *gate
	users   int
	// idleSince is when the last call ended; the linger counts from it.
	idleSince time.Time
	draining  bool
	wrote     bool
	closed    bool
	closeErr  error
	// opens counts successful opens, for tests.
	opens int
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
	return &Store{
		dir:     dir,
		opts:    makeOptions(opts),
		done:    make(chan struct{}),
		kick:    make(chan struct{}, 1),
		changed: make(chan struct{}),
	}
}

// Close makes further calls fail with ErrClosed, waits for the calls in
// flight and closes the database cleanly, so that the next process needs no
// log replay. Closing a closed Store does nothing.
func (s *Store) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
		s.wake()
	}
	for s.state != stateIdle {
		ch := s.changed
		s.waiters++
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
		s.waiters--
	}
	err := s.closeErr
	s.closeErr = nil
	s.mu.Unlock()
	return err
}

// broadcast tells waiters that the state changed; s.mu must be held.
func (s *Store) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// wake asks the watcher to look at the state now rather than at its next tick.
func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
