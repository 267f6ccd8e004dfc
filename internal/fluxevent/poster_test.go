package fluxevent_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/fluxevent"
	"github.com/imagereflector/reflector/internal/testenv"
)

// receiver is an event receiver on 127.0.0.1 that decodes what it gets with Flux's own type
// and answers each request with the next of its codes (the last one repeats).
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	codes []int
	got   []eventv1.Event
	// requests counts every request, decodable or not.
	requests int
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	t.Helper()
	r := &receiver{codes: codes}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var e eventv1.Event
		err := json.NewDecoder(req.Body).Decode(&e)
		r.mu.Lock()
		r.requests++
		code := http.StatusAccepted
		if len(r.codes) > 0 {
			code = r.codes[0]
			if len(r.codes) > 1 {
				r.codes = r.codes[1:]
			}
		}
		if err == nil && req.Method == http.MethodPost && req.Header.Get("Content-Type") == "application/json" {
			r.got = append(r.got, e)
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) events() []eventv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eventv1.Event(nil), r.got...)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func policyRef() corev1.ObjectReference {
	return corev1.ObjectReference{
		Kind: v1.ImagePolicyKind, APIVersion: v1.GroupVersion.String(),
		Namespace: "apps", Name: "app", UID: "uid-1", ResourceVersion: "7",
	}
}

func repositoryRef() corev1.ObjectReference {
	return corev1.ObjectReference{
		Kind: v1.ImageRepositoryKind, APIVersion: v1.GroupVersion.String(),
		Namespace: "apps", Name: "app",
	}
}

func TestPosterSendsFluxPayload(t *testing.T) {
	r := newReceiver(t)
	p, err := fluxevent.New(r.srv.URL+"/", fluxevent.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	annotations := map[string]string{
		"event.toolkit.fluxcd.io/team":       "platform",
		"kustomize.toolkit.fluxcd.io/name":   "apps",
		"reconcile.fluxcd.io/requestedAt":    "now",
		"event.toolkit.fluxcd.io.other/name": "not the prefix",
	}
	p.Post(policyRef(), annotations, corev1.EventTypeNormal, "Succeeded", "Latest image tag for 'ghcr.io/org/app' resolved to 1.2.0")
	p.Post(repositoryRef(), nil, corev1.EventTypeWarning, "ReadOperationFailed", "scan failed")
	p.Close()

	got := r.events()
	if len(got) != 2 {
		t.Fatalf("received %d events, want 2: %+v", len(got), got)
	}
	host, _ := os.Hostname()
	pol, repo := got[0], got[1]
	if pol.InvolvedObject != policyRef() || pol.Severity != eventv1.EventSeverityInfo || pol.Reason != "Succeeded" ||
		pol.Message != "Latest image tag for 'ghcr.io/org/app' resolved to 1.2.0" || pol.Action != fluxevent.ActionSelectImage ||
		pol.ReportingController != "image-reflector-controller" || pol.ReportingInstance != host || pol.Timestamp.IsZero() {
		t.Errorf("ImagePolicy event: %+v", pol)
	}
	if len(pol.Metadata) != 1 || pol.Metadata["event.toolkit.fluxcd.io/team"] != "platform" {
		t.Errorf("metadata %v, want only the event.toolkit.fluxcd.io/ annotations", pol.Metadata)
	}
	if repo.InvolvedObject != repositoryRef() || repo.Severity != eventv1.EventSeverityError || repo.Reason != "ReadOperationFailed" ||
		repo.Action != fluxevent.ActionScan || repo.Metadata != nil {
		t.Errorf("ImageRepository event: %+v", repo)
	}
}

func TestNewPoster(t *testing.T) {
	p, err := fluxevent.New("")
	if p != nil || err != nil {
		t.Errorf(`New("") = %v, %v; want nil, nil`, p, err)
	}
	// A nil Poster takes events and closes without effect.
	p.Post(policyRef(), nil, corev1.EventTypeNormal, "Succeeded", "m")
	p.Close()
	for _, addr := range []string{"notification-controller", "ftp://host/", "http:///path", "http://user:planted-password@[::1"} {
		if _, err := fluxevent.New(addr); err == nil {
			t.Errorf("New(%q) accepted", addr)
		} else if strings.Contains(err.Error(), "planted-password") {
			t.Errorf("New(%q): the error shows the password: %v", addr, err)
		}
	}
}

// A receiver that answers 5xx costs the first event its retries; the events after it get one
// attempt each until one is accepted, after which failures are retried again.
func TestPosterRetriesOnlyWhileTheReceiverAnswers(t *testing.T) {
	r := newReceiver(t, 503, 503, 503, 503, 202, 503, 202)
	p, err := fluxevent.New(r.srv.URL, fluxevent.WithRetries(2), fluxevent.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	post := func() { p.Post(policyRef(), nil, corev1.EventTypeNormal, "Succeeded", "m") }
	post() // 503, 503, 503: failed, receiver marked down
	post() // 503: one attempt only
	post() // 202: up again
	post() // 503, then 202 on the retry
	p.Close()
	if n := r.count(); n != 7 {
		t.Errorf("%d requests, want 7 (3 for the first event, 1 for the second, 1 for the third, 2 for the fourth)", n)
	}
}

// notification-controller answers 429 to a duplicate of a recent event: that is no failure, and
// it is not retried.
func TestPosterDoesNotRetryDuplicates(t *testing.T) {
	r := newReceiver(t, 429)
	p, err := fluxevent.New(r.srv.URL, fluxevent.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	p.Post(policyRef(), nil, corev1.EventTypeNormal, "Succeeded", "m")
	p.Post(policyRef(), nil, corev1.EventTypeNormal, "Succeeded", "m")
	p.Close()
	if n := r.count(); n != 2 {
		t.Errorf("%d requests for two duplicates, want 2", n)
	}
}

// A receiver that takes requests and never answers, or that refuses connections, never holds
// up the caller: Post returns at once whatever the queue holds, and Close gives up after its
// drain time.
func TestPosterNeverBlocksOnADownReceiver(t *testing.T) {
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })

	refused := "http://" + testenv.Refusing(t) + "/"

	for name, addr := range map[string]string{"hanging": hanging.URL, "refused": refused} {
		t.Run(name, func(t *testing.T) {
			p, err := fluxevent.New(addr, fluxevent.WithQueue(10), fluxevent.WithDrain(200*time.Millisecond),
				fluxevent.WithLogger(quiet()))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 1000 {
					p.Post(repositoryRef(), nil, corev1.EventTypeWarning, "ReadOperationFailed", "scan failed")
				}
				p.Close()
			}()
			// Not a timing assertion: a Post that waited for the receiver would never return.
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("posting to a receiver that is down blocked the caller")
			}
		})
	}
}
