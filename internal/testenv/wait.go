package testenv

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually checks.
const pollEvery = 20 * time.Millisecond

// Eventually calls check until it returns nil, every 20 ms, and fails tb with check's last
// error when within has passed first. It is the one place where tests wait for another
// goroutine or process to get somewhere, and (with EventuallyEvery and Consistently) the one
// place where they sleep.
func Eventually(tb testing.TB, within time.Duration, check func() error) {
	tb.Helper()
	EventuallyEvery(tb, within, pollEvery, check)
}

// EventuallyEvery is Eventually with checks every interval: for a benchmark that measures how
// long until check passes, to the resolution that interval gives.
func EventuallyEvery(tb testing.TB, within, interval time.Duration, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not within %s: %v", within, err)
		}
		time.Sleep(interval)
	}
}

// Consistently calls check every interval for the duration during, and fails tb with check's
// error as soon as it returns one: for a property that must hold while another goroutine or
// process has the time to break it.
func Consistently(tb testing.TB, during, interval time.Duration, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(during)
	for {
		if err := check(); err != nil {
			tb.Fatalf("within %s: %v", during, err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(interval)
	}
}

// RequestToken returns a reconcile-request value for now in the form the flux CLI writes
// (RFC 3339 with nanoseconds, UTC).
func RequestToken(now time.Time) string {
	return now.UTC().Format(time.RFC3339Nano)
}
