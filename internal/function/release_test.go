package function

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestReleaseEvery(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"": DefaultReleaseEvery, "off": 0, "0": 0, "10s": 10 * time.Second, "nonsense": DefaultReleaseEvery, "-1s": DefaultReleaseEvery,
	} {
		if got := ReleaseEvery(func(string) string { return v }); got != want {
			t.Errorf("%s=%q: %v, want %v", ReleaseEveryEnv, v, got, want)
		}
	}
}

func TestReleaseAfterStore(t *testing.T) {
	for v, want := range map[string]bool{"": true, "on": true, "off": false} {
		if got := ReleaseAfterStore(func(string) string { return v }); got != want {
			t.Errorf("%s=%q: %v, want %v", ReleaseAfterStoreEnv, v, got, want)
		}
	}
}

// sink keeps allocations on the heap.
var sink []byte

// ReleaseNow leaves none of the heap's free pages resident: after it, the heap holds from the
// system no more than what is in use.
func TestReleaseNowReturnsFreePages(t *testing.T) {
	for range 64 {
		sink = make([]byte, 256<<10)
		sink[0] = 1
	}
	sink = nil
	ReleaseNow()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if kept := m.HeapIdle - m.HeapReleased; kept > 1<<20 {
		t.Errorf("%d bytes of free heap still held after ReleaseNow", kept)
	}
}

// A Releaser runs at most one release per period: calls within it add one release at its end.
func TestReleaserAtMostOncePerPeriod(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	r := &Releaser{Every: 100 * time.Millisecond, Release: func() {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
	}}
	start := time.Now()
	for range 10 {
		r.Request()
	}
	time.Sleep(250 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("%d releases for 10 requests within a period, want 2 (one at once, one after the period)", len(at))
	}
	if at[0].Sub(start) > 50*time.Millisecond || at[1].Sub(at[0]) < 100*time.Millisecond {
		t.Errorf("releases at %v and %v after the first request, want at once and after 100ms", at[0].Sub(start), at[1].Sub(start))
	}
}
