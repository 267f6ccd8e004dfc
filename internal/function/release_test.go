package function

import (
	"runtime"
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
