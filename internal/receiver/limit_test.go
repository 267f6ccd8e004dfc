package receiver

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestAddressLimitsTake(t *testing.T) {
	now := time.Unix(0, 0)
	l := newAddressLimits(1, 3, 100, func() time.Time { return now })
	for i := range 3 {
		if !l.take("192.0.2.1") {
			t.Fatalf("take %d of a burst of 3 refused", i)
		}
	}
	if l.take("192.0.2.1") {
		t.Error("a fourth take within the same instant passed")
	}
	if !l.take("192.0.2.2") {
		t.Error("another address shares the first one's bucket")
	}
	now = now.Add(2 * time.Second)
	for i := range 2 {
		if !l.take("192.0.2.1") {
			t.Errorf("take %d after two seconds at 1/s refused", i)
		}
	}
	if l.take("192.0.2.1") {
		t.Error("the bucket refilled beyond the elapsed time")
	}
}

func TestAddressLimitsChargeAfterTheFact(t *testing.T) {
	now := time.Unix(0, 0)
	l := newAddressLimits(1, 3, 100, func() time.Time { return now })
	// Requests that are not charged (authenticated ones) never spend the bucket, however many.
	for i := range 100 {
		if !l.allow("192.0.2.1") {
			t.Fatalf("allow %d without any charge refused", i)
		}
	}
	// Ten requests let through at once, all charged afterwards: the bucket owes seven.
	for range 10 {
		if !l.allow("192.0.2.1") {
			t.Fatal("allow refused before any charge")
		}
	}
	for range 10 {
		l.charge("192.0.2.1")
	}
	now = now.Add(7 * time.Second)
	if l.allow("192.0.2.1") {
		t.Error("allowed while the bucket still owes the concurrent charges")
	}
	now = now.Add(time.Second)
	if !l.allow("192.0.2.1") {
		t.Error("refused once the debt was paid back")
	}
	if !l.allow("192.0.2.2") {
		t.Error("another address shares the first one's debt")
	}
}

func TestAddressLimitsHoldABoundedNumberOfBuckets(t *testing.T) {
	now := time.Unix(0, 0)
	l := newAddressLimits(1, 2, 50, func() time.Time { return now })
	for i := range 10000 {
		l.take(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		if n := l.len(); n > 50 {
			t.Fatalf("%d buckets after %d addresses, want at most 50", n, i+1)
		}
	}
	// Buckets that refilled go first: a drained one survives an eviction that finds any.
	now = now.Add(time.Hour)
	l = newAddressLimits(1, 2, 3, func() time.Time { return now })
	l.charge("idle")
	now = now.Add(time.Minute)
	l.charge("drained")
	l.charge("drained")
	l.charge("third")
	l.charge("fourth")
	if l.allow("drained") {
		t.Error("the drained bucket was dropped while a refilled one was held")
	}
}

func TestAddressLimitsOff(t *testing.T) {
	l := newAddressLimits(rate.Inf, 0, 1, time.Now)
	for range 100 {
		if !l.take("x") {
			t.Fatal("an infinite rate refused")
		}
	}
}

// len returns how many buckets are held.
func (l *addressLimits) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
