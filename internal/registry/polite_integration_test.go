package registry_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestIntegrationTooManyRequestsWaitsForRetryAfter(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	reg.Inject(testenv.RegistryTooManyRequests("2").On("/tags/list"))

	res, err := scan(t, fast(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tags) != 1 {
		t.Fatalf("tags = %q, want [v1]", res.Tags)
	}
	lists := listRequests(reg)
	if len(lists) != 2 || lists[0].Status != http.StatusTooManyRequests || lists[1].Status != http.StatusOK {
		t.Fatalf("tag list requests = %+v, want a 429 then a 200", lists)
	}
	if gap := lists[1].Start.Sub(lists[0].End); gap < 2*time.Second {
		t.Errorf("the retry came %s after the 429, want at least the 2s of Retry-After", gap)
	}
}

func TestIntegrationTooManyRequestsBeyondTheDeadlineFailsAtOnce(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	reg.Inject(testenv.RegistryTooManyRequests("120").On("/tags/list"))

	obj := imageRepository("default", reg.Image("app"), func(o *v1.ImageRepository) {
		o.Spec.Timeout.Duration = 10 * time.Second
	})
	_, err := scan(t, fast(), nil, obj)
	wantError(t, err, v1.ReadOperationFailedReason, "TOOMANYREQUESTS", "rate limit exceeded", "retry after 2m0s")
	if _, ok := errors.AsType[*registry.RetryAfterError](err); !ok {
		t.Errorf("error %v is no RetryAfterError", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v is the deadline, want a failure before it", err)
	}
	if n := len(listRequests(reg)); n != 1 {
		t.Errorf("%d tag list requests, want 1", n)
	}
}

func TestIntegrationServerErrorsAreRetried(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	for range 3 {
		reg.Inject(testenv.RegistryServerError().On("/tags/list"))
	}

	res, err := scan(t, fast(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tags) != 1 {
		t.Fatalf("tags = %q, want [v1]", res.Tags)
	}
	var statuses []int
	for _, r := range listRequests(reg) {
		statuses = append(statuses, r.Status)
	}
	if len(statuses) != 4 || statuses[3] != http.StatusOK {
		t.Errorf("tag list statuses = %v, want three 500s and a 200", statuses)
	}
}

func TestIntegrationServerErrorsGiveUpAfterRetries(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	for range 10 {
		reg.Inject(testenv.RegistryServerError().On("/tags/list"))
	}

	_, err := scan(t, fast(registry.WithRetries(2, time.Millisecond, time.Millisecond)), nil, imageRepository("default", reg.Image("app")))
	wantError(t, err, v1.ReadOperationFailedReason, "UNKNOWN: injected server error")
	if terr, ok := errors.AsType[*transport.Error](err); !ok || terr.StatusCode != http.StatusInternalServerError {
		t.Errorf("error %v does not carry the registry's 500", err)
	}
	if n := len(listRequests(reg)); n != 3 {
		t.Errorf("%d tag list requests, want 3: the first and two retries", n)
	}
}

func TestIntegrationSlowerThanTheTimeout(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	reg.Inject(testenv.RegistrySlow(time.Minute).On("/tags/list"))

	obj := imageRepository("default", reg.Image("app"), func(o *v1.ImageRepository) {
		o.Spec.Timeout.Duration = time.Second
	})
	_, err := scan(t, fast(), nil, obj)
	wantError(t, err, v1.ReadOperationFailedReason, "timed out after 1s")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v is not the deadline", err)
	}
}

func TestIntegrationRateLimitIsSharedByScans(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	reg.Push(t, "other", "v1")
	const perSecond = 5
	c := registry.New(registry.WithRateLimit(perSecond, 1))

	done := make(chan error, 2)
	for _, repo := range []string{"app", "other"} {
		go func() {
			_, err := scan(t, c, nil, imageRepository("default", reg.Image(repo)))
			done <- err
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	reqs := reg.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4: a ping and a page per scan", len(reqs))
	}
	first, last := reqs[0].Start, reqs[0].Start
	for _, r := range reqs {
		if r.Start.Before(first) {
			first = r.Start
		}
		if r.Start.After(last) {
			last = r.Start
		}
	}
	// Three intervals of 200ms between four requests; a little slack for the server's clock
	// reading the arrival later than the client sent the first one.
	if span, want := last.Sub(first), 3*time.Second/perSecond-50*time.Millisecond; span < want {
		t.Errorf("4 requests within %s, want at least %s at %d per second", span, want, perSecond)
	}
}

// listRequests returns reg's tag list requests.
func listRequests(reg *testenv.Registry) []testenv.RegistryRequest {
	var out []testenv.RegistryRequest
	for _, r := range reg.Requests() {
		if r.Method == http.MethodGet && strings.Contains(r.URI, "/tags/list") {
			out = append(out, r)
		}
	}
	return out
}
