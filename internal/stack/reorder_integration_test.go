package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

const reorderManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: order
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: order
spec:
  imageRepositoryRef:
    name: order
  policy:
    semver:
      range: ^1.x
`

// reorderingSink stands where a Broker stands between the scan and policy functions: it answers
// each CloudEvent at once, as a Broker's ingress does, and delivers it to the policy function.
// While holding, it keeps the TagsChanged events of one subject instead and delivers them later,
// in the opposite order.
type reorderingSink struct {
	t       *testing.T
	subject string

	mu      sync.Mutex
	target  string
	holding bool
	held    []*http.Request
	bodies  [][]byte
}

func (r *reorderingSink) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	if r.holding && req.Header.Get("Ce-Type") == events.TypeTagsChanged && req.Header.Get("Ce-Subject") == r.subject {
		r.held = append(r.held, req)
		r.bodies = append(r.bodies, body)
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		return
	}
	r.mu.Unlock()
	if code := r.deliver(req, body); code >= 300 {
		http.Error(w, "delivery failed", code)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// deliver sends req, with body, to the policy function and returns its status code.
func (r *reorderingSink) deliver(req *http.Request, body []byte) int {
	r.mu.Lock()
	target := r.target
	r.mu.Unlock()
	out, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		r.t.Error(err)
		return http.StatusInternalServerError
	}
	out.Header = req.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		r.t.Errorf("delivering %s to the policy function: %v", req.Header.Get("Ce-Type"), err)
		return http.StatusBadGateway
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitHeld waits until n TagsChanged events of the subject are held.
func (r *reorderingSink) waitHeld(n int) {
	r.t.Helper()
	testenv.Eventually(r.t, 30*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.held) < n {
			return fmt.Errorf("%d TagsChanged events of %s held, want %d", len(r.held), r.subject, n)
		}
		return nil
	})
}

// releaseReversed stops holding and delivers the held events, the last first, each after the
// one before was answered.
func (r *reorderingSink) releaseReversed() {
	r.t.Helper()
	r.mu.Lock()
	r.holding = false
	held, bodies := r.held, r.bodies
	r.held, r.bodies = nil, nil
	r.mu.Unlock()
	for i := len(held) - 1; i >= 0; i-- {
		if code := r.deliver(held[i], bodies[i]); code >= 300 {
			r.t.Fatalf("the policy function answered %d to a held TagsChanged", code)
		}
	}
}

// TestEventsInTheOppositeOrderIntegration delivers the TagsChanged events of two pushes to the
// running policy function in the opposite order, through a sink in the scan function's K_SINK
// that holds them: the later push's event, whose delta starts from a revision the policy never
// evaluated, must take the store and reach the later tag; the earlier push's event, delivered
// after it, must change nothing. A watch of the ImagePolicy must see latestRef go from the first
// tag to the last and never back.
func TestEventsInTheOppositeOrderIntegration(t *testing.T) {
	ctx := context.Background()
	sink := &reorderingSink{t: t, subject: "default/order"}
	proxy := httptest.NewServer(sink)
	t.Cleanup(proxy.Close)
	s := start(t, stack.Options{CronEvery: time.Hour,
		Env: map[string][]string{stack.Scan: {"K_SINK=" + proxy.URL}}})
	sink.mu.Lock()
	sink.target = s.PolicyURL
	sink.mu.Unlock()

	reg := testenv.NewRegistry(t)
	image := reg.Image("order/app")
	reg.Push(t, "order/app", "1.0.0")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(reorderManifests, image))); err != nil {
		t.Fatal(err)
	}
	waitTag(t, s, "order", "1.0.0")
	p, err := s.Kube.Policies.Get(ctx, "default", "order")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.Kube.Policies.Watch(wctx, "default", metav1.ListOptions{
		FieldSelector: "metadata.name=order", ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	sink.mu.Lock()
	sink.holding = true
	sink.mu.Unlock()
	for _, tag := range []string{"1.1.0", "1.2.0"} {
		reg.Push(t, "order/app", tag)
		post(t, s, image, "order/app", tag)
		// The second push's scan must add to the list the first one stored.
		testenv.Eventually(t, 30*time.Second, func() error {
			r, err := s.Kube.Repositories.Get(ctx, "default", "order")
			if err != nil {
				return err
			}
			if want := map[string]int{"1.1.0": 2, "1.2.0": 3}[tag]; r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != want {
				return fmt.Errorf("ImageRepository order holds %+v, want %d tags", r.Status.LastScanResult, want)
			}
			return nil
		})
	}
	sink.waitHeld(2)
	if got, err := s.Kube.Policies.Get(ctx, "default", "order"); err != nil {
		t.Fatal(err)
	} else if refTag(got.Status.LatestRef) != "1.0.0" {
		t.Fatalf("with both announcements held, latestRef is %s, want 1.0.0", refTag(got.Status.LatestRef))
	}
	sink.releaseReversed()

	var seen []string
	deadline := time.After(30 * time.Second)
	settled := time.Time{}
	for settled.IsZero() || time.Since(settled) < 3*time.Second {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of ImagePolicy order ended")
			}
			if got, ok := ev.Object.(*imagev1.ImagePolicy); ok {
				tag := refTag(got.Status.LatestRef)
				if len(seen) == 0 || seen[len(seen)-1] != tag {
					seen = append(seen, tag)
				}
				if tag == "1.2.0" && settled.IsZero() {
					settled = time.Now()
				}
			}
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("latestRef did not reach 1.2.0 (the watch saw %q)", seen)
		}
	}
	for _, tag := range seen {
		if tag != "1.0.0" && tag != "1.2.0" {
			t.Fatalf("a watch saw latestRef %s; it must go from 1.0.0 to 1.2.0 only (saw %q)", tag, seen)
		}
	}
	if seen[len(seen)-1] != "1.2.0" {
		t.Fatalf("latestRef went back after 1.2.0: the watch saw %q", seen)
	}
	// The policy records the revision it evaluated last, the repository's latest: the earlier
	// push's event did not write its own revision over it, which would send the next push's
	// delta to the store, or let the cron reconciler take the policy for one behind.
	r, err := s.Kube.Repositories.Get(ctx, "default", "order")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Kube.Policies.Get(ctx, "default", "order")
	if err != nil {
		t.Fatal(err)
	}
	ev := apimeta.FindStatusCondition(got.Status.Conditions, imagev1.TagsEvaluatedCondition)
	if ev == nil || r.Status.LastScanResult == nil || ev.Message != r.Status.LastScanResult.Revision {
		t.Fatalf("ImagePolicy order records %+v; want the repository's revision %+v", ev, r.Status.LastScanResult)
	}
}
