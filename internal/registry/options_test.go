package registry

import (
	"strings"
	"testing"

	"golang.org/x/time/rate"
)

func TestRateLimitFromEnv(t *testing.T) {
	tests := []struct {
		name        string
		rate, burst string
		want        bool // whether an option is returned
		wantRate    rate.Limit
		wantBurst   int
	}{
		{name: "neither keeps the defaults", wantRate: DefaultRate, wantBurst: DefaultBurst},
		{name: "rate alone keeps the default burst", rate: "2.5", want: true, wantRate: 2.5, wantBurst: DefaultBurst},
		{name: "burst alone keeps the default rate", burst: "40", want: true, wantRate: DefaultRate, wantBurst: 40},
		{name: "both", rate: "3", burst: "7", want: true, wantRate: 3, wantBurst: 7},
		{name: "rate 0 is no limit", rate: "0", want: true, wantRate: rate.Inf, wantBurst: DefaultBurst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("REFLECTOR_REGISTRY_RATE", tt.rate)
			t.Setenv("REFLECTOR_REGISTRY_BURST", tt.burst)
			opts, err := RateLimitFromEnv()
			if err != nil {
				t.Fatal(err)
			}
			if got := len(opts) > 0; got != tt.want {
				t.Fatalf("options returned: %v, want %v", got, tt.want)
			}
			c := New(opts...)
			if c.rate != tt.wantRate || c.burst != tt.wantBurst {
				t.Errorf("rate %v, burst %d; want %v, %d", c.rate, c.burst, tt.wantRate, tt.wantBurst)
			}
		})
	}
}

func TestRateLimitFromEnvRefusesBadNumbers(t *testing.T) {
	for _, tt := range []struct{ rate, burst, want string }{
		{rate: "fast", want: "REFLECTOR_REGISTRY_RATE"},
		{burst: "lots", want: "REFLECTOR_REGISTRY_BURST"},
		{rate: "5", burst: "1.5", want: "REFLECTOR_REGISTRY_BURST"},
	} {
		t.Setenv("REFLECTOR_REGISTRY_RATE", tt.rate)
		t.Setenv("REFLECTOR_REGISTRY_BURST", tt.burst)
		opts, err := RateLimitFromEnv()
		if err == nil || !strings.Contains(err.Error(), tt.want) || opts != nil {
			t.Errorf("rate %q burst %q: options %d, error %v; want an error naming %s", tt.rate, tt.burst, len(opts), err, tt.want)
		}
	}
}
