package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheCheckPasses(t *testing.T) {
	calls := 0
	Eventually(t, time.Second, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("%d calls, want 3", calls)
	}
}

func TestPollWrapsTheLastErrorWhenTimeRunsOut(t *testing.T) {
	last := errors.New("still down")
	err := Poll(context.Background(), 30*time.Millisecond, time.Millisecond, func() error { return last })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "not within 30ms") {
		t.Errorf("Poll = %v, want the last error wrapped with the time allowed", err)
	}
}

func TestPollStopsAtAHaltedError(t *testing.T) {
	gone := errors.New("exited")
	calls := 0
	err := Poll(context.Background(), time.Minute, time.Millisecond, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return Halt(gone)
	})
	if !errors.Is(err, gone) || err.Error() != "exited" || calls != 3 {
		t.Errorf("Poll = %v after %d calls, want %v after 3", err, calls, gone)
	}
}

func TestPollStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Poll(ctx, time.Minute, time.Millisecond, func() error {
		if calls++; calls == 2 {
			cancel()
		}
		return errors.New("not yet")
	})
	if err != context.Canceled || calls != 2 {
		t.Errorf("Poll = %v after %d calls, want %v after 2", err, calls, context.Canceled)
	}
}

func TestConsistentlyChecksForTheWholeDuration(t *testing.T) {
	start, calls := time.Now(), 0
	Consistently(t, 30*time.Millisecond, time.Millisecond, func() error {
		calls++
		return nil
	})
	if time.Since(start) < 30*time.Millisecond || calls < 2 {
		t.Errorf("Consistently returned after %s and %d checks", time.Since(start), calls)
	}
}
