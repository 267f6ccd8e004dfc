package receiver_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
)

// TestWebhookIntegrationRemembersListings: deliveries within the match TTL share one listing of
// the ImageRepositories; a repository created since is still found, because a delivery that
// matches nothing lists again; one deleted since is dropped when its annotation finds it gone.
func TestWebhookIntegrationRemembersListings(t *testing.T) {
	f := newFixture(t, receiver.WithMatchTTL(time.Hour), receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(t, token)
	f.reg.Push(t, "catalog/a", "1.0.0")
	f.reg.Push(t, "catalog/b", "1.0.0")
	f.createRepo(t, ns, "a", f.reg.Image("catalog/a"))
	// A listing of the cache that misses "a" would count a second, fresh listing.
	f.waitCached(t, receiver.Object{Namespace: ns, Name: "a"})
	hook := func(id, repo string) (int, receiver.Answer) {
		t.Helper()
		body := fmt.Appendf(nil, `{"events":[{"id":%q,"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":%q,"tag":"1.0.0"},"request":{"host":%q}}]}`,
			id, repo, f.reg.Host())
		return f.send(t, signed("distribution", "/hook/distribution/"+ns, token, body))
	}

	before := f.lists.Load()
	for i := range 20 {
		if code, a := hook(fmt.Sprintf("a-%d", i), "catalog/a"); code != http.StatusAccepted || len(a.Objects) != 1 {
			t.Fatalf("delivery %d: %d %+v", i, code, a)
		}
	}
	if n := f.lists.Load() - before; n != 1 {
		t.Errorf("%d listings for 20 deliveries in the TTL, want 1", n)
	}

	f.createRepo(t, ns, "b", f.reg.Image("catalog/b"))
	code, a := hook("b-1", "catalog/b")
	if code != http.StatusAccepted || len(a.Objects) != 1 || a.Objects[0].Name != "b" {
		t.Errorf("a repository created after the listing: %d %+v", code, a)
	}

	if err := f.kube.Repositories.Delete(context.Background(), ns, "a"); err != nil {
		t.Fatal(err)
	}
	code, a = hook("a-gone", "catalog/a")
	if code != http.StatusOK || len(a.Objects) != 0 {
		t.Errorf("a repository deleted after the listing: %d %+v, want 200 and no objects", code, a)
	}
}

// TestWebhookIntegrationSharesAListingInFlight: deliveries that arrive together, before any
// listing is remembered, wait for the one listing in flight instead of each making their own.
func TestWebhookIntegrationSharesAListingInFlight(t *testing.T) {
	f := newFixture(t, receiver.WithMatchTTL(time.Hour), receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(t, token)
	f.reg.Push(t, "together/a", "1.0.0")
	f.createRepo(t, ns, "a", f.reg.Image("together/a"))
	// A listing of the cache that misses "a" would count a second, fresh listing.
	f.waitCached(t, receiver.Object{Namespace: ns, Name: "a"})

	const deliveries = 16
	before := f.lists.Load()
	var wg sync.WaitGroup
	answers := make(chan int, deliveries)
	for i := range deliveries {
		wg.Go(func() {
			body := fmt.Appendf(nil, `{"events":[{"id":"together-%d","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"together/a","tag":"1.0.0"},"request":{"host":%q}}]}`,
				i, f.reg.Host())
			code, a := f.send(t, signed("distribution", "/hook/distribution/"+ns, token, body))
			if len(a.Objects) != 1 {
				code = -code
			}
			answers <- code
		})
	}
	wg.Wait()
	close(answers)
	for code := range answers {
		if code != http.StatusAccepted {
			t.Errorf("a delivery answered %d (negative: not matched to the one repository)", code)
		}
	}
	if n := f.lists.Load() - before; n != 1 {
		t.Errorf("%d listings for %d deliveries at once, want 1", n, deliveries)
	}
}
