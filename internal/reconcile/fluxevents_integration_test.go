package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/fluxevent"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/testenv"
)

// fluxReceiver stands in for notification-controller's event receiver on 127.0.0.1: it decodes
// each post with Flux's own type.
type fluxReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []eventv1.Event
}

func newFluxReceiver(t *testing.T) *fluxReceiver {
	t.Helper()
	r := &fluxReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var e eventv1.Event
		if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusBadRequest)
			return
		}
		if err := json.NewDecoder(req.Body).Decode(&e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, e)
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// recorder returns a Recorder whose Events are also posted to the receiver as Flux events.
func (r *fluxReceiver) recorder(t *testing.T, c *kube.Client, component string) *kube.Recorder {
	t.Helper()
	p, err := fluxevent.New(r.srv.URL+"/", fluxevent.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	rec := kube.NewRecorder(c, component, kube.PostingTo(p))
	t.Cleanup(rec.Shutdown)
	return rec
}

// wait returns the events about kind namespace/name once there are n of them, or fails.
func (r *fluxReceiver) wait(t *testing.T, kind, namespace, name string, n int) []eventv1.Event {
	t.Helper()
	var about []eventv1.Event
	testenv.Eventually(t, 10*time.Second, func() error {
		if about = r.about(kind, namespace, name); len(about) < n {
			return fmt.Errorf("%d Flux events about %s %s/%s, want %d: %+v", len(about), kind, namespace, name, n, about)
		}
		return nil
	})
	if len(about) != n {
		t.Fatalf("%d Flux events about %s %s/%s, want %d: %+v", len(about), kind, namespace, name, n, about)
	}
	return about
}

func (r *fluxReceiver) about(kind, namespace, name string) []eventv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []eventv1.Event
	for _, e := range r.got {
		o := e.InvolvedObject
		if o.Kind == kind && o.Namespace == namespace && o.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// fluxEvent is an event checkFluxEvent expects.
type fluxEvent struct {
	kind, namespace, name     string
	severity, reason, message string
	metadata                  map[string]string
}

// checkFluxEvent checks one event as Flux's image-reflector-controller posts it: the object as
// an Alert's eventSources names it, the severity an Alert's eventSeverity filters on, Flux's
// reason and message, and as metadata only the object's event.toolkit.fluxcd.io/ annotations
// (Flux's controller sends no revision for these kinds). want's message is a part of the event's.
func checkFluxEvent(t *testing.T, e eventv1.Event, want fluxEvent) {
	t.Helper()
	kind, namespace, name := want.kind, want.namespace, want.name
	severity, reason, message, metadata := want.severity, want.reason, want.message, want.metadata
	o := e.InvolvedObject
	if o.APIVersion != v1.GroupVersion.String() || o.Kind != kind || o.Namespace != namespace || o.Name != name || o.UID == "" {
		t.Errorf("involvedObject = %+v, want %s %s %s/%s", o, v1.GroupVersion, kind, namespace, name)
	}
	if e.Severity != severity || e.Reason != reason || !strings.Contains(e.Message, message) {
		t.Errorf("event = %s %s %q, want %s %s containing %q", e.Severity, e.Reason, e.Message, severity, reason, message)
	}
	if e.ReportingController != "image-reflector-controller" || e.Timestamp.IsZero() {
		t.Errorf("reportingController %q, timestamp %v", e.ReportingController, e.Timestamp)
	}
	if _, ok := e.Metadata[v1.GroupVersion.Group+"/"+eventv1.MetaRevisionKey]; ok {
		t.Errorf("metadata %v carries a revision, which Flux's controller does not send", e.Metadata)
	}
	if len(e.Metadata) != len(metadata) {
		t.Errorf("metadata = %v, want %v", e.Metadata, metadata)
	}
	for k, v := range metadata {
		if e.Metadata[k] != v {
			t.Errorf("metadata = %v, want %v", e.Metadata, metadata)
		}
	}
}

func TestFluxEventsIntegrationScan(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	nc := newFluxReceiver(t)
	f.scanner.Recorder = nc.recorder(t, f.kube, "reflector-scan")
	team := map[string]string{"event.toolkit.fluxcd.io/team": "platform"}
	f.reg.Push(t, "app", "1.0.0", "1.1.0")
	f.createRepo(t, "app", func(r *v1.ImageRepository) {
		r.Annotations = map[string]string{"event.toolkit.fluxcd.io/team": "platform", "other.example.com/x": "y"}
	})

	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	got := nc.wait(t, v1.ImageRepositoryKind, f.ns, "app", 1)
	checkFluxEvent(t, got[0], fluxEvent{v1.ImageRepositoryKind, f.ns, "app", eventv1.EventSeverityInfo, v1.SucceededReason, "successful scan: found 2 tags", team})
	if got[0].Action != fluxevent.ActionScan {
		t.Errorf("action %q", got[0].Action)
	}

	// A scan that finds the same tags is no news: Flux records it as a trace, which it does not post.
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	// A failure is posted with severity error, every time.
	f.reg.Inject(testenv.RegistryUnauthorized().On("/tags/list"))
	if out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil || out.Failure != v1.AuthenticationFailedReason {
		t.Fatalf("failing scan: %+v, %v", out, err)
	}
	got = nc.wait(t, v1.ImageRepositoryKind, f.ns, "app", 2)
	checkFluxEvent(t, got[1], fluxEvent{v1.ImageRepositoryKind, f.ns, "app", eventv1.EventSeverityError, v1.AuthenticationFailedReason, "UNAUTHORIZED", team})

	// Recovering is news even with the same tags, as Flux posts a Ready that follows a failure.
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	got = nc.wait(t, v1.ImageRepositoryKind, f.ns, "app", 3)
	checkFluxEvent(t, got[2], fluxEvent{v1.ImageRepositoryKind, f.ns, "app", eventv1.EventSeverityInfo, v1.SucceededReason, "successful scan: found 2 tags", team})

	// New tags are news.
	f.reg.Push(t, "app", "1.2.0")
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"}); err != nil {
		t.Fatal(err)
	}
	got = nc.wait(t, v1.ImageRepositoryKind, f.ns, "app", 4)
	checkFluxEvent(t, got[3], fluxEvent{v1.ImageRepositoryKind, f.ns, "app", eventv1.EventSeverityInfo, v1.SucceededReason, "successful scan: found 3 tags", team})

	// A spec that cannot be scanned is a Stalled failure, posted as an error too.
	f.createRepo(t, "tagged", func(r *v1.ImageRepository) { r.Spec.Image += ":v1" })
	if _, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "tagged"}); err != nil {
		t.Fatal(err)
	}
	got = nc.wait(t, v1.ImageRepositoryKind, f.ns, "tagged", 1)
	checkFluxEvent(t, got[0], fluxEvent{v1.ImageRepositoryKind, f.ns, "tagged", eventv1.EventSeverityError, v1.ImageURLInvalidReason, "", nil})
}

func TestFluxEventsIntegrationEvaluate(t *testing.T) {
	f := newEvalFixture(t)
	nc := newFluxReceiver(t)
	f.Ev.Recorder = nc.recorder(t, f.Kube, "reflector-policy")
	f.Repo(t, f.NS, "app", "ghcr.io/org/app")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("^1")})

	f.Evaluate(t, f.NS, "app")
	got := nc.wait(t, v1.ImagePolicyKind, f.NS, "app", 1)
	checkFluxEvent(t, got[0], fluxEvent{v1.ImagePolicyKind, f.NS, "app", eventv1.EventSeverityInfo, v1.SucceededReason, "Latest image tag for 'ghcr.io/org/app' resolved to 1.1.0", nil})
	if got[0].Action != fluxevent.ActionSelectImage {
		t.Errorf("action %q", got[0].Action)
	}

	// The same result again is not posted; a new latest image is.
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0", "0.9.0")
	f.Evaluate(t, f.NS, "app")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0", "1.2.0")
	f.Evaluate(t, f.NS, "app")
	got = nc.wait(t, v1.ImagePolicyKind, f.NS, "app", 2)
	checkFluxEvent(t, got[1], fluxEvent{v1.ImagePolicyKind, f.NS, "app", eventv1.EventSeverityInfo, v1.SucceededReason, "Latest image tag for 'ghcr.io/org/app' updated from 1.1.0 to 1.2.0", nil})

	// A failed evaluation is posted with severity error.
	f.Policy(t, f.NS, "orphan", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("missing"), Policy: evaltest.Semver("^1")})
	f.Evaluate(t, f.NS, "orphan")
	got = nc.wait(t, v1.ImagePolicyKind, f.NS, "orphan", 1)
	checkFluxEvent(t, got[0], fluxEvent{v1.ImagePolicyKind, f.NS, "orphan", eventv1.EventSeverityError, v1.DependencyNotReadyReason, "referenced ImageRepository " + f.NS + "/missing does not exist", nil})

	f.Policy(t, f.NS, "none", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("^7")})
	f.Evaluate(t, f.NS, "none")
	got = nc.wait(t, v1.ImagePolicyKind, f.NS, "none", 1)
	checkFluxEvent(t, got[0], fluxEvent{v1.ImagePolicyKind, f.NS, "none", eventv1.EventSeverityError, v1.FailureReason, "", nil})
}

// A notification-controller that takes the request and never answers holds up no scan.
func TestFluxEventsIntegrationDownReceiverBlocksNoScan(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	arrived := make(chan struct{}, 100)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })
	p, err := fluxevent.New(hanging.URL, fluxevent.WithDrain(100*time.Millisecond),
		fluxevent.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	rec := kube.NewRecorder(f.kube, "reflector-scan", kube.PostingTo(p))
	t.Cleanup(rec.Shutdown)
	f.scanner.Recorder = rec
	f.reg.Push(t, "app", "1.0.0")
	f.createRepo(t, "app")
	for i := range 5 {
		f.reg.Push(t, "app", "1.0."+string(rune('1'+i)))
		out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"})
		if err != nil || !out.Changed {
			t.Fatalf("scan %d with the receiver hanging: %+v, %v", i, out, err)
		}
	}
	// The first event reached the receiver and is still waiting for its answer.
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no Flux event reached the receiver")
	}
	if n := f.get(t, "app").Status.LastScanResult.TagCount; n != 6 {
		t.Errorf("tag count %d after the scans, want 6", n)
	}
}
