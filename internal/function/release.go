package function

import (
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
)

// ReleaseEveryEnv names how often a function gives back memory it holds but does not need:
// REFLECTOR_RELEASE_EVERY, a duration; "off" or 0 for never.
const ReleaseEveryEnv = "REFLECTOR_RELEASE_EVERY"

// SteadyGCPercentEnv names the collector's target (as GOGC) from the first release on:
// REFLECTOR_STEADY_GOGC, 100 when unset; 0 or less keeps GOGC's.
const SteadyGCPercentEnv = "REFLECTOR_STEADY_GOGC"

// DefaultReleaseEvery is the period when REFLECTOR_RELEASE_EVERY is unset.
const DefaultReleaseEvery = 30 * time.Second

// ReleaseEvery returns the release period from the environment, zero for never.
func ReleaseEvery(getenv func(string) string) time.Duration {
	v := getenv(ReleaseEveryEnv)
	if v == "" {
		return DefaultReleaseEvery
	}
	if v == "off" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return DefaultReleaseEvery
	}
	return d
}

// Release starts giving back, every period (none when zero), the free part of the Go heap.
// The first release comes a few seconds after the start; from then on the collector's target
// is REFLECTOR_STEADY_GOGC. It stops when stop is closed.
func Release(period time.Duration, stop <-chan struct{}) {
	if period <= 0 {
		return
	}
	steadyGCPercent := 100
	if v := os.Getenv(SteadyGCPercentEnv); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			steadyGCPercent = n
		}
	}
	go func() {
		t := time.NewTimer(min(period, 5*time.Second))
		defer t.Stop()
		first := true
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if first {
				// GOGC=400 (knative/) spares a start the collections that would free
				// nothing; once started, the heap need not grow to five times what is live.
				if steadyGCPercent > 0 {
					debug.SetGCPercent(steadyGCPercent)
				}
				first = false
			}
			debug.FreeOSMemory()
			t.Reset(period)
		}
	}()
}

// ReleaseAfterStoreEnv names whether the scan function gives its free heap back to the system
// each time its tag store closes: REFLECTOR_RELEASE_AFTER_STORE, "off" for never, on otherwise.
// A store session (open, a push's delta, close) leaves some 13 MB of Badger's buffers behind
// (BenchmarkWriterSession in internal/store); returned at once, after the close and off the
// request's path, they do not stay resident until the next collection and the scavenger.
const ReleaseAfterStoreEnv = "REFLECTOR_RELEASE_AFTER_STORE"

// ReleaseAfterStore tells from the environment whether to give back the free heap after each
// close of the tag store.
func ReleaseAfterStore(getenv func(string) string) bool {
	return getenv(ReleaseAfterStoreEnv) != "off"
}

// ReleaseNow collects and gives the free part of the Go heap back to the system at once.
func ReleaseNow() { debug.FreeOSMemory() }

// Releaser runs a release (ReleaseNow) at most once per Every: a call within Every of the last
// release has one more run when Every has passed, and further calls meanwhile add nothing. A
// burst of store sessions, a listing wave handing the store over after each listing, then costs
// one collection a period rather than one a session.
type Releaser struct {
	Every   time.Duration
	Release func()

	mu      sync.Mutex
	last    time.Time
	pending bool
}

// Request runs a release now, or once Every has passed since the last.
func (r *Releaser) Request() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending {
		return
	}
	if wait := r.Every - time.Since(r.last); wait > 0 && !r.last.IsZero() {
		r.pending = true
		time.AfterFunc(wait, func() {
			r.mu.Lock()
			r.pending, r.last = false, time.Now()
			r.mu.Unlock()
			r.Release()
		})
		return
	}
	r.last = time.Now()
	r.Release()
}
