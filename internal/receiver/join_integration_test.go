package receiver_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/testenv"
)

// While a scan runs and its follow-up is collected with a request recorded in the object, a
// further delivery for the repository is answered 202 without a patch of its own, and the
// follow-up scan brings its tag in and handles the recorded request.
func TestWebhookIntegrationJoinsACollectedScan(t *testing.T) {
	f := newFixture(t, receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(t, token)
	f.reg.Push(t, "join/app", "1.0.0")
	f.createRepo(t, ns, "app", f.reg.Image("join/app"))
	path := "/hook/distribution/" + ns
	deliver := func(id, tag string) receiver.Answer {
		t.Helper()
		code, a := f.send(t, signed("distribution", path, token, distributionPush(id, f.reg.Host(), "join/app", tag)))
		if code != http.StatusAccepted || fmt.Sprint(a.Objects) != fmt.Sprintf("[{%s app}]", ns) {
			t.Fatalf("delivery %s: %d %+v", id, code, a)
		}
		return a
	}

	// A first scan lists the repository, so that later pushes are confirmed one by one.
	deliver("zero", "1.0.0")
	waitHandled(t, f, ns, "app", f.annotation(t, ns, "app"))

	// The next delivery's scan confirms 1.1.0 and is held there.
	release := make(chan struct{})
	f.reg.Inject(testenv.RegistryHeld(release).On("/manifests/1.1.0"))
	f.reg.Push(t, "join/app", "1.1.0")
	before := f.reg.RequestCount()
	deliver("first", "1.1.0")
	testenv.Eventually(t, 30*time.Second, func() error {
		if f.reg.RequestCount() == before {
			return errors.New("the first scan has not reached the registry")
		}
		return nil
	})
	// The second is recorded (a patch) and collected into the follow-up.
	deliver("second", "1.2.0")
	recorded := f.annotation(t, ns, "app")
	// The third joins the follow-up: the object keeps the second's request.
	f.reg.Push(t, "join/app", "1.2.0", "1.3.0")
	deliver("third", "1.3.0")
	if got := f.annotation(t, ns, "app"); got != recorded {
		t.Errorf("the joined delivery patched the request: %q, want the second's %q", got, recorded)
	}
	close(release)
	f.waitTag(t, ns, "app", "1.3.0")
	waitHandled(t, f, ns, "app", recorded)
}
