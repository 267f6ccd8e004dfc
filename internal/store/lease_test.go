package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/testenv"
)

// Many goroutines of one process share one open database, and concurrent
// AddTags on one key lose nothing.
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
					_, _, err = s.AddTags(ctx, key, testID, []string{fmt.Sprintf("w%d-%d", w, i)})
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

// HandOver closes an idle database at once, and one in use when its last call ends; the next
// call opens it again and finds what was written.
func TestHandOverClosesWithoutLinger(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, WithLinger(time.Hour))
	s.HandOver() // nothing open: nothing to do
	if _, _, err := s.Put(ctx, "ns/a", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s.HandOver()
	waitIdle(t, s)

	db, err := s.acquire(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	s.HandOver()
	testenv.Consistently(t, 20*time.Millisecond, time.Millisecond, func() error {
		if db.IsClosed() {
			return errors.New("database closed under a call in flight")
		}
		return nil
	})
	s.release()
	waitIdle(t, s)
	if e, err := s.Get(ctx, "ns/a", testID); err != nil || fmt.Sprint(e.Tags) != "[v1]" {
		t.Errorf("after the hand-overs: %v, %v", e.Tags, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opens != 3 {
		t.Errorf("opens = %d, want 3", s.opens)
	}
}

// Warm opens an idle directory in the background; a call arriving afterwards finds it open and
// does not open it again.
func TestWarmOpensInTheBackground(t *testing.T) {
	s := New(t.TempDir())
	defer s.Close()
	s.Warm()
	testenv.Eventually(t, 10*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.state != stateOpen {
			return errors.New("Warm did not open the directory")
		}
		return nil
	})
	if _, _, err := s.Put(context.Background(), "ns/a", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s.Warm() // open already: nothing to do
	s.mu.Lock()
	opens := s.opens
	s.mu.Unlock()
	if opens != 1 {
		t.Errorf("%d opens for Warm and the call that followed it, want 1", opens)
	}
}
