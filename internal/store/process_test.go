package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/testenv"
)

// Two writer processes and a reader process share one directory for
// thousands of calls: every call succeeds within its deadline, the reader
// never sees a torn list, a generation going back or a tag disappearing,
// and no added tag is lost.
func TestProcessesShareDirectory(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	n := 1500
	if testing.Short() {
		n = 300
	}
	s := New(dir)
	if _, _, err := s.Put(ctx, "ns/put", testID, genTags(0, smallGen(0)), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Put(ctx, "ns/add", testID, []string{"base"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	reader := startHelper(t, "reader", dir, "")
	a := startHelper(t, "writer", dir, fmt.Sprintf("a:%d", n))
	b := startHelper(t, "writer", dir, fmt.Sprintf("b:%d", n))
	sa, sb := a.summary(), b.summary()
	sr := reader.summary()
	t.Logf("%v: writer a %d ops p50 %.1fms p99 %.1fms max %.1fms; writer b %d ops p50 %.1fms p99 %.1fms max %.1fms; reader %d reads, waits p50 %.1fms p99 %.1fms max %.1fms",
		time.Since(start).Round(time.Millisecond), sa.Ops, sa.P50ms, sa.P99ms, sa.MaxMs, sb.Ops, sb.P50ms, sb.P99ms, sb.MaxMs, sr.Ops, sr.P50ms, sr.P99ms, sr.MaxMs)
	if sr.Ops < 10 {
		t.Errorf("reader got in only %d times", sr.Ops)
	}

	r := New(dir, ReadOnly())
	defer r.Close()
	e, err := r.Get(ctx, "ns/put", testID)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := checkGen(e, smallGen); err != nil || g != n/2 {
		t.Errorf("final ns/put is generation %d (%v), want %d", g, err, n/2)
	}
	added, err := r.Get(ctx, "ns/add", testID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for _, id := range []string{"a", "b"} {
			if id == "a" && i%2 == 0 {
				continue
			}
			if tag := fmt.Sprintf("%s-%d", id, i); !slices.Contains(added.Tags, tag) {
				t.Errorf("lost update: %s missing from ns/add", tag)
			}
		}
	}
}

// A writer killed in the middle of writing 100k-tag lists leaves a store
// that the next reader opens after one log replay, and in which the list is
// the last committed generation or the one being written, never a mix.
func TestKilledWriterRecovers(t *testing.T) {
	ctx := testCtx(t)
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	dir := t.TempDir()
	for round := range rounds {
		w := startHelper(t, "bigwriter", dir, "")
		committed, err := strconv.Atoi(w.next())
		if err != nil {
			t.Fatal(err)
		}
		// Kill at a random point of a later write. Its output ends when it
		// dies; the pipe is read to the end before Wait closes it.
		time.AfterFunc(time.Duration(rand.IntN(150))*time.Millisecond, func() {
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
		})
		for l := range w.lines {
			if g, err := strconv.Atoi(l); err == nil {
				committed = g
			}
		}
		_ = w.cmd.Wait()

		// The kill left a log that a plain read-only open refuses.
		if db, err := badger.Open(badger.DefaultOptions(dir).WithReadOnly(true).WithLogger(nil)); err == nil {
			db.Close()
			t.Errorf("round %d: read-only open after SIGKILL needed no replay", round)
		} else if !needsReplay(err) {
			t.Errorf("round %d: read-only open after SIGKILL: %v", round, err)
		}

		r := New(dir, ReadOnly())
		e, err := r.Get(ctx, "ns/big", testID)
		if err != nil {
			t.Fatalf("round %d: reader after SIGKILL: %v", round, err)
		}
		g, err := checkGen(e, bigGen)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if g != committed && g != committed+1 {
			t.Fatalf("round %d: read generation %d, last committed %d", round, g, committed)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after generation %d, read %d", round, committed, g)
	}
	// A writer works on the recovered directory.
	s := New(dir)
	defer s.Close()
	if _, err := s.Push(ctx, "ns/big", testID, []string{"after-recovery"}, ""); err != nil {
		t.Fatal(err)
	}
}

// A caller that finds the directory held past its deadline gets ErrLocked,
// naming the directory, and gets in once the holder leaves.
func TestLockedUntilDeadline(t *testing.T) {
	dir := t.TempDir()
	h := startHelper(t, "holder", dir, "")
	if l := h.next(); l != "ready" {
		t.Fatalf("holder printed %q", l)
	}
	for _, opts := range [][]Option{nil, {ReadOnly()}} {
		s := New(dir, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		_, err := s.Get(ctx, "ns/a", testID)
		cancel()
		if !errors.Is(err, ErrLocked) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), dir) {
			t.Errorf("Get on a held directory = %v; want ErrLocked naming %s", err, dir)
		}
		if waited := time.Since(start); waited > 2*time.Second {
			t.Errorf("gave up after %v, deadline was 300ms", waited)
		}
		s.Close()
	}

	s := New(dir, ReadOnly())
	defer s.Close()
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := s.Get(ctx, "ns/a", testID)
		got <- err
	}()
	// The holder leaves once the reader waits for it.
	testenv.Eventually(t, 10*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.state != stateOpening {
			return errors.New("the reader is not waiting for the directory")
		}
		return nil
	})
	if l := h.stop(); l != "closed" {
		t.Fatalf("holder printed %q", l)
	}
	if err := <-got; !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get once the holder left = %v, want ErrNotFound", err)
	}
}

// An idle holder gives the directory up as soon as a process of the other
// mode waits for it, long before its hour-long linger ends: the waiter rings
// the gate and the holder hears it.
func TestIdleHolderGivesWay(t *testing.T) {
	for _, tc := range []struct {
		holder []Option
		role   string
		arg    string
		// first is how the helper's first line starts: the reader prints
		// once it has read, the writer its summary once it has written.
		first string
	}{
		{holder: nil, role: "reader", first: "reading"},
		{holder: []Option{ReadOnly()}, role: "writer", arg: "b:1", first: "{"},
	} {
		t.Run(tc.role+" waits", func(t *testing.T) {
			ctx := testCtx(t)
			dir := t.TempDir()
			seedRoles(t, dir)
			s := New(dir, append(tc.holder, WithLinger(time.Hour))...)
			defer s.Close()
			if _, err := s.Get(ctx, "ns/put", testID); err != nil {
				t.Fatal(err)
			}
			if l := startHelper(t, tc.role, dir, tc.arg).next(); !strings.HasPrefix(l, tc.first) {
				t.Fatalf("the %s printed %q", tc.role, l)
			}
			waitIdle(t, s)
		})
	}
}

// Without the inotify watch (no instance left) a busy holder still gives
// way: it probes the gate when its calls end.
func TestHolderWithoutRingsGivesWayAfterACall(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	seedRoles(t, dir)
	s := New(dir, WithLinger(time.Hour))
	defer s.Close()
	if _, err := s.Get(ctx, "ns/put", testID); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	if err := s.rings.f.Close(); err != nil {
		t.Fatal(err)
	}
	s.rings = &rings{}
	s.mu.Unlock()
	h := startHelper(t, "reader", dir, "")
	testenv.Eventually(t, 10*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.gate.waiting(true) {
			return errors.New("the reader does not wait yet")
		}
		return nil
	})
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		t.Fatal("the holder gave way without a call: it heard a ring")
	}
	if _, err := s.Get(ctx, "ns/put", testID); err != nil {
		t.Fatal(err)
	}
	if l := h.next(); l != "reading" {
		t.Fatalf("reader printed %q", l)
	}
	waitIdle(t, s)
}
