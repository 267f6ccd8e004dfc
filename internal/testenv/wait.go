package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// pollEvery is how often Eventually checks.
const pollEvery = 20 * time.Millisecond

// Poll calls check every interval until it returns nil, and returns nil then. When within has
// passed first, it returns check's last error wrapped with that duration; when ctx ends first,
// ctx's error; when check returns an error made by Halt, that error at once. It is the one place
// where tests and the harnesses that start servers for them (this package, internal/stack) wait
// for another goroutine or process to get somewhere, and so the one place where they sleep:
// Eventually and Consistently are built on it for tests, and the harnesses, which return an
// error instead of failing a test, call it directly.
func Poll(ctx context.Context, within, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		if errors.As(err, new(halted)) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", within, err)
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// Halt marks err, returned by a check, as final: Poll returns it without checking again. It is
// for a check that sees that what it waits for can no longer happen, such as a process that has
// exited.
func Halt(err error) error {
	return halted{err}
}

// halted is an error from Halt.
type halted struct{ err error }

func (h halted) Error() string { return h.err.Error() }
func (h halted) Unwrap() error { return h.err }

// Eventually calls check until it returns nil, every 20 ms, and fails tb with check's last
// error when within has passed first. Tests wait through it, EventuallyEvery or Consistently;
// all three poll through Poll.
func Eventually(tb testing.TB, within time.Duration, check func() error) {
	tb.Helper()
	EventuallyEvery(tb, within, pollEvery, check)
}

// EventuallyEvery is Eventually with checks every interval: for a benchmark that measures how
// long until check passes, to the resolution that interval gives.
func EventuallyEvery(tb testing.TB, within, interval time.Duration, check func() error) {
	tb.Helper()
	// Not tb.Context: that ends before the cleanups run, and a cleanup may wait too.
	if err := Poll(context.Background(), within, interval, check); err != nil {
		tb.Fatal(err)
	}
}

// holding is what Consistently's check returns to Poll while the property holds, so that Poll
// keeps checking until the time is up.
var holding = errors.New("holding")

// Consistently calls check every interval for the duration during, and fails tb with check's
// error as soon as it returns one: for a property that must hold while another goroutine or
// process has the time to break it.
func Consistently(tb testing.TB, during, interval time.Duration, check func() error) {
	tb.Helper()
	err := Poll(context.Background(), during, interval, func() error {
		if err := check(); err != nil {
			return Halt(err)
		}
		return holding
	})
	if !errors.Is(err, holding) {
		tb.Fatalf("within %s: %v", during, err)
	}
}

// RequestToken returns a reconcile-request value for now in the form the flux CLI writes
// (RFC 3339 with nanoseconds, UTC).
func RequestToken(now time.Time) string {
	return now.UTC().Format(time.RFC3339Nano)
}
