package receiver

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestAddressLimitsTakeAndGiveBack(t *testing.T) {
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
	// A request that turns out to be authenticated gives its token back.
	l.give("192.0.2.1")
	if !l.take("192.0.2.1") {
		t.Error("a token given back cannot be taken")
	}
	if l.take("192.0.2.1") {
		t.Error("giving back made more than one token")
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
	// Giving back never exceeds the burst.
	for range 10 {
		l.give("192.0.2.2")
	}
	for i := range 4 {
		if ok := l.take("192.0.2.2"); ok != (i < 3) {
			t.Errorf("take %d after giving back more than was taken: %v", i, ok)
		}
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
	l.take("idle")
	now = now.Add(time.Minute)
	l.take("drained")
	l.take("drained")
	l.take("third")
	l.take("fourth")
	if l.take("drained") {
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
