package receiver_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
)

// TestWebhookIntegrationBurst sends 1,000 distribution deliveries for 10 repositories from 32
// concurrent senders: every one is annotated and answered 202, every repository is scanned
// and ends with its latest request handled, and the registry sees one tag listing per
// repository (the rest are pings and HEADs).
func TestWebhookIntegrationBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("burst")
	}
	f := newFixture(t, receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(t, token)
	const repos, deliveries, senders = 10, 1000, 32
	for i := range repos {
		f.reg.Push(t, fmt.Sprintf("burst/app-%d", i), "1.0.0", "1.1.0")
		f.createRepo(t, ns, fmt.Sprintf("app-%d", i), f.reg.Image(fmt.Sprintf("burst/app-%d", i)))
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range senders {
		wg.Go(func() {
			for i := range work {
				body := fmt.Appendf(nil, `{"events":[{"id":"burst-%d","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"burst/app-%d","tag":"1.%d.0"},"request":{"host":%q}}]}`,
					i, i%repos, i%2, f.reg.Host())
				code, _ := f.send(t, signed("distribution", "/hook/distribution/"+ns, token, body))
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	for i := range deliveries {
		work <- i
	}
	close(work)
	wg.Wait()
	if codes[http.StatusAccepted] != deliveries {
		t.Fatalf("answers: %v", codes)
	}
	for i := range repos {
		name := fmt.Sprintf("app-%d", i)
		waitHandled(t, f, ns, name, f.annotation(t, ns, name))
		if r := f.get(t, ns, name); r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != 2 {
			t.Errorf("%s: %+v", name, r.Status.LastScanResult)
		}
		if n := f.tagListings(fmt.Sprintf("burst/app-%d", i)); n < 1 {
			t.Errorf("%s was never listed", name)
		}
	}
	// A repository's first scan lists its tags and the coalesced follow-ups confirm the pushed
	// tags with HEADs; the burst's annotations do not make the first scan's status write fail,
	// which would make a follow-up list again.
	if n := f.tagListings(""); n > repos {
		t.Errorf("%d tag listings for %d repositories, want one each", n, repos)
	}
	t.Logf("registry requests: %d for %d deliveries; tag listings: %d; ImageRepository listings: %d", len(f.reg.Requests()), deliveries, f.tagListings(""), f.lists.Load())
}
