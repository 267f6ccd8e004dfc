package stack

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	quick := time.Second
	var got []time.Duration
	prev := time.Duration(0)
	for range 8 {
		prev = backoff(prev, quick)
		got = append(got, prev)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits after %d quick exits: %v, want %v", len(want), got, want)
		}
	}

	for _, tc := range []struct {
		name     string
		prev, up time.Duration
		want     time.Duration
	}{
		{"first exit, however soon", 0, 0, 500 * time.Millisecond},
		{"first exit after a long run", 0, time.Hour, 500 * time.Millisecond},
		{"exit just before the reset", 4 * time.Second, backoffReset - time.Millisecond, 8 * time.Second},
		{"exit after staying up long enough", 10 * time.Second, backoffReset, 500 * time.Millisecond},
		{"at the cap", 10 * time.Second, 0, 10 * time.Second},
	} {
		if got := backoff(tc.prev, tc.up); got != tc.want {
			t.Errorf("%s: backoff(%v, %v) = %v, want %v", tc.name, tc.prev, tc.up, got, tc.want)
		}
	}
}
