package scan

import (
	"strings"
	"testing"

	"golang.org/x/time/rate"
)

func TestBucketFromEnv(t *testing.T) {
	const rateVar, burstVar = "REFLECTOR_WEBHOOK_RATE", "REFLECTOR_WEBHOOK_BURST"
	tests := []struct {
		name        string
		rate, burst string
		wantSet     bool
		wantRate    rate.Limit
		wantBurst   int
	}{
		{name: "neither", wantRate: 10, wantBurst: 50},
		{name: "rate alone keeps the default burst", rate: "2", wantSet: true, wantRate: 2, wantBurst: 50},
		{name: "burst alone keeps the default rate", burst: "200", wantSet: true, wantRate: 10, wantBurst: 200},
		{name: "both", rate: "0.5", burst: "3", wantSet: true, wantRate: 0.5, wantBurst: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(rateVar, tt.rate)
			t.Setenv(burstVar, tt.burst)
			r, b, set, err := bucketFromEnv(rateVar, burstVar, 10, 50)
			if err != nil {
				t.Fatal(err)
			}
			if r != tt.wantRate || b != tt.wantBurst || set != tt.wantSet {
				t.Errorf("got %v, %d, set %v; want %v, %d, set %v", r, b, set, tt.wantRate, tt.wantBurst, tt.wantSet)
			}
		})
	}
}

func TestBucketFromEnvRefusesBadNumbers(t *testing.T) {
	const rateVar, burstVar = "REFLECTOR_WEBHOOK_UNAUTHENTICATED_RATE", "REFLECTOR_WEBHOOK_UNAUTHENTICATED_BURST"
	for _, tt := range []struct{ rate, burst, want string }{
		{rate: "many", want: rateVar},
		{burst: "2.5", want: burstVar},
		{rate: "1", burst: "x", want: burstVar},
	} {
		t.Setenv(rateVar, tt.rate)
		t.Setenv(burstVar, tt.burst)
		_, _, set, err := bucketFromEnv(rateVar, burstVar, 5, 20)
		if err == nil || !strings.Contains(err.Error(), tt.want) || set {
			t.Errorf("rate %q burst %q: set %v, error %v; want an error naming %s", tt.rate, tt.burst, set, err, tt.want)
		}
	}
}
