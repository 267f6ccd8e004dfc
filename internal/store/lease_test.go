package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/testenv"
)

// Many goroutines of one process share one open database, and concurrent
// Pushes to one key lose nothing.
func TestConcurrentCallsShareOneOpen(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, WithLinger(time.Hour))
	const workers, rounds = 16, 50
	var revs revisions
	for k := range 4 {
		if _, _, err := s.Put(ctx, fmt.Sprintf("ns/r%d", k), testID, []string{"base"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("ns/r%d", (w+i)%4)
				var err error
				switch i % 4 {
				case 0, 1:
					_, err = s.Push(ctx, key, testID, []string{fmt.Sprintf("w%d-%d", w, i)}, "")
				case 2:
					var e Entry
					if e, err = s.Get(ctx, key, testID); err == nil {
						err = revs.check(e)
					}
				case 3:
					_, err = s.Keys(ctx)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var all []string
	for k := range 4 {
		e, err := s.Get(ctx, fmt.Sprintf("ns/r%d", k), testID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e.Tags...)
	}
	for w := range workers {
		for i := range rounds {
			if i%4 < 2 && !slices.Contains(all, fmt.Sprintf("w%d-%d", w, i)) {
				t.Errorf("lost tag w%d-%d", w, i)
			}
		}
	}
	s.mu.Lock()
	opens := s.opens
	s.mu.Unlock()
	if opens != 1 {
		t.Errorf("opened %d times, want once", opens)
	}
}

// The database closes once the linger has passed, and reopens on demand.
func TestLingerCloses(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, WithLinger(20*time.Millisecond))
	if _, _, err := s.Put(ctx, "ns/a", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if _, err := s.Get(ctx, "ns/a", testID); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opens != 2 {
		t.Errorf("opens = %d, want 2", s.opens)
	}
}

// Close waits for a call in flight rather than closing under it.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	ctx := testCtx(t)
	s := New(t.TempDir(), WithLinger(time.Hour))
	db, err := s.acquire(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	testenv.Consistently(t, 50*time.Millisecond, time.Millisecond, func() error {
		select {
		case err := <-closed:
			return fmt.Errorf("Close returned (%v) while a call was in flight", err)
		default:
		}
		if db.IsClosed() {
			return errors.New("database closed under a call in flight")
		}
		return nil
	})
	s.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !db.IsClosed() {
		t.Fatal("Close returned with the database open")
	}
}

// With HandOverListings, a Put that changes an entry hands the directory over: the database closes at once, or, with
// a call in flight, when that call ends; an unchanged Put keeps it open for the linger. The next
// call opens it again and finds what was written.
func TestChangedPutHandsOver(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, WithLinger(time.Hour), HandOverListings())
	s.handOver() // nothing open: nothing to do
	if _, _, err := s.Put(ctx, "ns/a", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)

	db, err := s.acquire(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, changed, err := s.Put(ctx, "ns/a", testID, []string{"v1", "v2"}, time.Now()); err != nil || !changed {
		t.Fatalf("Put: changed %v, %v", changed, err)
	}
	testenv.Consistently(t, 20*time.Millisecond, time.Millisecond, func() error {
		if db.IsClosed() {
			return errors.New("database closed under a call in flight")
		}
		return nil
	})
	s.release()
	waitIdle(t, s)
	if e, err := s.Get(ctx, "ns/a", testID); err != nil || fmt.Sprint(e.Tags) != "[v1 v2]" {
		t.Errorf("after the hand-overs: %v, %v", e.Tags, err)
	}
	if _, changed, err := s.Put(ctx, "ns/a", testID, []string{"v2", "v1"}, time.Now()); err != nil || changed {
		t.Fatalf("unchanged Put: changed %v, %v", changed, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateOpen {
		t.Errorf("an unchanged Put closed the database (state %v)", s.state)
	}
	if s.opens != 3 {
		t.Errorf("opens = %d, want 3", s.opens)
	}
}

// AfterClose runs once after each close of the directory, when the directory is closed.
func TestAfterCloseRunsAfterEachClose(t *testing.T) {
	ctx := testCtx(t)
	var s *Store
	idle := make(chan bool, 4)
	s = newTestStore(t, WithLinger(10*time.Millisecond), AfterClose(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		idle <- s.state == stateIdle && s.db == nil
	}))
	for i := range 2 {
		if _, _, err := s.Put(ctx, "ns/a", testID, []string{fmt.Sprintf("v%d", i)}, time.Now()); err != nil {
			t.Fatal(err)
		}
		select {
		case closed := <-idle:
			if !closed {
				t.Errorf("close %d: AfterClose ran while the database was open", i+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("close %d: AfterClose did not run", i+1)
		}
	}
	if len(idle) != 0 {
		t.Errorf("AfterClose ran %d times more than the closes", len(idle))
	}
}
