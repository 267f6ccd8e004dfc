package registry

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"2", 2 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"0", 0, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		got, ok := retryAfter(tt.header, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBackoffGrowsWithJitterUpToTheCap(t *testing.T) {
	p := &politeTransport{c: New(WithRetries(10, 100*time.Millisecond, time.Second))}
	for attempt, base := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		base *= time.Millisecond
		for range 50 {
			if d := p.backoff(attempt); d < base/2 || d > base {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", attempt, d, base/2, base)
			}
		}
	}
}

func TestNextPage(t *testing.T) {
	page, _ := url.Parse("https://registry.example/v2/app/tags/list?n=1000")
	tests := []struct {
		name  string
		links []string
		want  string
		err   bool
	}{
		{"last page", nil, "", false},
		{"relative link", []string{`</v2/app/tags/list?last=v9&n=1000>; rel="next"`}, "https://registry.example/v2/app/tags/list?last=v9&n=1000", false},
		{"n added when missing", []string{`</v2/app/tags/list?last=v9>; rel="next"`}, "https://registry.example/v2/app/tags/list?last=v9&n=500", false},
		{"next among other links", []string{`</docs>; rel="help", </v2/app/tags/list?last=b&n=1>; rel=next`}, "https://registry.example/v2/app/tags/list?last=b&n=1", false},
		{"absolute link on the same host", []string{`<https://registry.example/v2/app/tags/list?last=c&n=2>; rel="next"`}, "https://registry.example/v2/app/tags/list?last=c&n=2", false},
		{"another host is refused", []string{`<https://evil.example/v2/app/tags/list?last=c>; rel="next"`}, "", true},
		{"malformed", []string{`/v2/app/tags/list?last=c; rel="next"`}, "", true},
		{"the same page is refused", []string{`</v2/app/tags/list?n=1000>; rel="next"`}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := nextPage(tt.links, page, 500)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			var s string
			if got != nil {
				s = got.String()
			}
			if s != tt.want {
				t.Errorf("next = %q, want %q", s, tt.want)
			}
		})
	}
}

func TestSmallerPage(t *testing.T) {
	var sizes []int
	for n := 1000; n > 0; n = smallerPage(n) {
		sizes = append(sizes, n)
	}
	if want := []int{1000, 100, 50, 25, 12}; !slices.Equal(sizes, want) {
		t.Errorf("page sizes %v, want %v", sizes, want)
	}
}

// answers is a RoundTripper that answers each request with the next status of its list.
type answers struct {
	codes []int
	n     int
}

func (a *answers) RoundTrip(req *http.Request) (*http.Response, error) {
	code := a.codes[min(a.n, len(a.codes)-1)]
	a.n++
	return &http.Response{StatusCode: code, Header: http.Header{"Retry-After": {"0"}}, Body: http.NoBody, Request: req}, nil
}

func TestServerErrorsToCallerAreReturnedAtOnce(t *testing.T) {
	c := New(WithRateLimit(math.Inf(1), 1), WithRetries(3, time.Microsecond, time.Microsecond))
	tests := []struct {
		name     string
		codes    []int
		toCaller bool
		want     int // the status returned
		requests int
	}{
		{"500 retried by the transport", []int{500, 500, 200}, false, 200, 3},
		{"500 to the caller", []int{500, 200}, true, 500, 1},
		{"503 to the caller", []int{503, 200}, true, 503, 1},
		{"429 still retried", []int{429, 429, 200}, true, 200, 3},
	}
	for _, tt := range tests {
		inner := &answers{codes: tt.codes}
		rt := &politeTransport{inner: inner, c: c}
		ctx := context.Background()
		if tt.toCaller {
			ctx = serverErrorsToCaller(ctx)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, "http://registry.test/v2/app/manifests/v1", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if resp.StatusCode != tt.want || inner.n != tt.requests {
			t.Errorf("%s: status %d after %d requests, want %d after %d", tt.name, resp.StatusCode, inner.n, tt.want, tt.requests)
		}
	}
}
