package receiver

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestDedupKeepsAtMostSizeAndForgetsReleased(t *testing.T) {
	d := newDedup(time.Minute, 3)
	now := time.Unix(0, 0)
	for _, k := range []string{"a", "b", "c", "d"} {
		if !d.claim(k, now) {
			t.Fatalf("first claim of %s refused", k)
		}
	}
	if n := d.held(); n != 3 {
		t.Errorf("%d keys held, want 3", n)
	}
	if d.claim("d", now) || d.claim("c", now) {
		t.Error("a repeat of a held key was claimed")
	}
	// a, the oldest, made room for d.
	if !d.claim("a", now) {
		t.Error("the oldest key was not forgotten at the bound")
	}
	d.release("a")
	if !d.claim("a", now) {
		t.Error("a released key was not claimed again")
	}
	if d.claim("a", now.Add(59*time.Second)) {
		t.Error("a key claimed again after its release was forgotten before its window ended")
	}
	if !d.claim("a", now.Add(61*time.Second)) {
		t.Error("a key was remembered after its window")
	}
}

func TestDedupShrinksAfterABurst(t *testing.T) {
	d := newDedup(time.Minute, 100_000)
	now := time.Unix(0, 0)
	for i := range 10_000 {
		if !d.claim(fmt.Sprint("burst-", i), now) {
			t.Fatalf("claim %d refused", i)
		}
	}
	if d.claim("burst-1", now.Add(time.Second)) {
		t.Error("a repeat within the window was claimed")
	}
	later := now.Add(2 * time.Minute)
	if !d.claim("after", later) {
		t.Fatal("a new key after the window was refused")
	}
	if n := d.held(); n != 1 {
		t.Errorf("%d keys held after the window, want 1", n)
	}
	if queued := len(d.order) - d.head; queued != 1 || cap(d.order) > 1 {
		t.Errorf("queue of %d claims in room for %d after the window, want 1 in 1", queued, cap(d.order))
	}
	if d.peak != 1 {
		t.Errorf("the index was not rebuilt after the burst: peak %d", d.peak)
	}
	if !d.claim("burst-1", later) {
		t.Error("a key of the burst was remembered after its window")
	}
}

// BenchmarkDedupHeld reports the heap that 10,000 remembered deliveries hold (bytes a key,
// after a collection), as after a burst of pushes within the window.
func BenchmarkDedupHeld(b *testing.B) {
	var before, after runtime.MemStats
	var per float64
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		d := newDedup(10*time.Minute, DefaultDedupSize)
		now := time.Now()
		for i := range DefaultDedupSize {
			d.claim(bodyKey("distribution/default", []byte(fmt.Sprint(i))), now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per = float64(after.HeapAlloc-before.HeapAlloc) / DefaultDedupSize
		runtime.KeepAlive(d)
	}
	b.ReportMetric(per, "B/key")
}
