package receiver_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/store"
)

// postEvent sends one CloudEvent from the source /test to the fixture in binary or structured
// mode and returns the status code and body of the answer.
func (f *fixture) postEvent(t testing.TB, structured bool, ceType, id string, data []byte) (int, string) {
	t.Helper()
	return f.post(t, cloudEvent{structured: structured, ceType: ceType, source: "/test", id: id}, data)
}

// cloudEvent is the attributes of a CloudEvent that a test sends, and its mode.
type cloudEvent struct {
	structured         bool
	ceType, source, id string
}

// post sends e with data to the fixture's CloudEvents surface and returns the status code and
// body of the answer.
func (f *fixture) post(t testing.TB, e cloudEvent, data []byte) (int, string) {
	t.Helper()
	var req *http.Request
	var err error
	if e.structured {
		envelope, _ := json.Marshal(map[string]any{
			"specversion": "1.0", "type": e.ceType, "source": e.source, "id": e.id,
			"datacontenttype": "application/json", "data": json.RawMessage(data),
		})
		req, err = http.NewRequest(http.MethodPost, f.srv.URL+"/", bytes.NewReader(envelope))
		if err == nil {
			req.Header.Set("Content-Type", "application/cloudevents+json")
		}
	} else {
		req, err = http.NewRequest(http.MethodPost, f.srv.URL+"/", bytes.NewReader(data))
		if err == nil {
			req.Header.Set("Ce-Specversion", "1.0")
			req.Header.Set("Ce-Type", e.ceType)
			req.Header.Set("Ce-Source", e.source)
			req.Header.Set("Ce-Id", e.id)
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCloudEventIntegration covers the broker path in both modes: the cron's scan request
// is scanned before the answer; an ApiServerSource add event of a never-scanned repository
// is scanned, and the update that the scan's status write causes is not; a CDEvents
// artifact.published push is matched in every namespace, annotated and scanned.
func TestCloudEventIntegration(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(t, "")
	f.reg.Push(t, "ce/cron", "1.0.0")
	f.reg.Push(t, "ce/source", "2.0.0")
	f.createRepo(t, ns, "cron", f.reg.Image("ce/cron"))
	f.createRepo(t, ns, "source", f.reg.Image("ce/source"))

	for _, structured := range []bool{false, true} {
		mode := map[bool]string{false: "binary", true: "structured"}[structured]
		t.Run(mode, func(t *testing.T) {
			// The cron reconciler's request: scanned by the time it is answered.
			data, _ := json.Marshal(events.ObjectRef{Namespace: ns, Name: "cron", Reason: "interval elapsed"})
			if code, body := f.postEvent(t, structured, events.TypeScanRequested, "cron-"+mode, data); code != http.StatusAccepted {
				t.Fatalf("scan request: %d %s", code, body)
			}
			if r := f.get(t, ns, "cron"); r.Status.LastScanResult == nil || r.Status.LastScanResult.LatestTags[0] != "1.0.0" {
				t.Fatalf("not scanned before the answer: %+v", r.Status)
			}
			// Undecodable data is refused for good.
			if code, body := f.postEvent(t, structured, events.TypeScanRequested, "bad-"+mode, []byte(`{"namespace": 1}`)); code != http.StatusBadRequest {
				t.Errorf("undecodable scan request: %d %s", code, body)
			}
			if code, _ := f.postEvent(t, structured, "com.example.unrelated", "x-"+mode, []byte(`{}`)); code != http.StatusAccepted {
				t.Errorf("unknown type: %d", code)
			}
		})
	}

	// ApiServerSource, resource mode: the object as it was added.
	obj, _ := json.Marshal(f.get(t, ns, "source"))
	obj = withTypeMeta(obj)
	if code, body := f.postEvent(t, true, events.TypeAPIServerAdd, "add-1", obj); code != http.StatusAccepted {
		t.Fatalf("add event: %d %s", code, body)
	}
	if r := f.get(t, ns, "source"); r.Status.LastScanResult == nil || r.Status.LastScanResult.LatestTags[0] != "2.0.0" {
		t.Fatalf("add event not scanned: %+v", r.Status)
	}
	listings := f.tagListings("")
	obj = withTypeMeta(mustJSON(t, f.get(t, ns, "source")))
	if code, body := f.postEvent(t, false, events.TypeAPIServerUpdate, "update-1", obj); code != http.StatusAccepted {
		t.Fatalf("update event: %d %s", code, body)
	}
	if f.tagListings("") != listings {
		t.Error("the update caused by the scan's own status write was scanned")
	}
	// A `flux reconcile` annotation makes the updated object due.
	annotated, err := f.kube.Repositories.RequestReconcile(t.Context(), ns, "source", "2030-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := f.postEvent(t, false, events.TypeAPIServerUpdate, "update-2", withTypeMeta(mustJSON(t, annotated))); code != http.StatusAccepted {
		t.Fatalf("annotated update: %d %s", code, body)
	}
	if f.tagListings("") != listings+1 || f.get(t, ns, "source").Status.LastHandledReconcileAt != "2030-01-01T00:00:00Z" {
		t.Error("a requested reconcile announced by ApiServerSource was not scanned")
	}
	// The same event again, as the adapter delivers it when the webhook that set the annotation
	// has had it scanned already: the object as it is now is not due, so no second listing.
	if code, body := f.postEvent(t, false, events.TypeAPIServerUpdate, "update-3", withTypeMeta(mustJSON(t, annotated))); code != http.StatusAccepted {
		t.Fatalf("stale annotated update: %d %s", code, body)
	}
	if got := f.tagListings(""); got != listings+1 {
		t.Errorf("an annotation handled since its event was sent was scanned again: %d listings, want %d", got, listings+1)
	}

	// A request that a receiver set for a push is that receiver's to scan: the event that
	// announces it costs no listing, however the object's status reads.
	pushed, err := f.kube.Repositories.RequestReconcile(t.Context(), ns, "source", reconcile.PushRequestToken(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := f.postEvent(t, false, events.TypeAPIServerUpdate, "update-4", withTypeMeta(mustJSON(t, pushed))); code != http.StatusAccepted {
		t.Fatalf("update for a push's request: %d %s", code, body)
	}
	if got := f.tagListings(""); got != listings+1 {
		t.Errorf("the event of a push's reconcile request was scanned: %d listings, want %d", got, listings+1)
	}

	// A delete takes the repository's tags out of the store.
	storeKey := reconcile.StoreKey(ns, "source")
	if keys, err := f.store.Keys(t.Context()); err != nil || !slices.Contains(keys, storeKey) {
		t.Fatalf("store keys %v, %v: want %s", keys, err, storeKey)
	}
	gone := withTypeMeta(mustJSON(t, f.get(t, ns, "source")))
	if err := f.kube.Repositories.Delete(t.Context(), ns, "source"); err != nil {
		t.Fatal(err)
	}
	if code, body := f.postEvent(t, false, events.TypeAPIServerDelete, "delete-1", gone); code != http.StatusAccepted {
		t.Fatalf("delete event: %d %s", code, body)
	}
	if keys, err := f.store.Keys(t.Context()); err != nil || slices.Contains(keys, storeKey) {
		t.Errorf("store keys after the delete event: %v, %v", keys, err)
	}

	// CDEvents artifact.published from the CDEvents spec, matched in every namespace.
	other := f.namespace(t, "")
	f.reg.Push(t, "myorg/myapp", "v0.1.0")
	f.createRepo(t, ns, "cd", "mycr.io/myorg/myapp")
	f.createRepo(t, other, "cd", "mycr.io/myorg/myapp")
	cd := testdata(t, "cdevents")
	if code, body := f.postEvent(t, true, "dev.cdevents.artifact.published.0.2.0", "271069a8", cd); code != http.StatusAccepted {
		t.Fatalf("cdevent: %d %s", code, body)
	}
	for _, n := range []string{ns, other} {
		if f.annotation(t, n, "cd") == "" {
			t.Fatalf("%s/cd not annotated before the answer", n)
		}
		f.waitTag(t, n, "cd", "v0.1.0")
	}
	// The broker's redelivery changes nothing.
	before := f.annotation(t, ns, "cd")
	if code, _ := f.postEvent(t, false, "dev.cdevents.artifact.published.0.2.0", "271069a8", cd); code != http.StatusAccepted || f.annotation(t, ns, "cd") != before {
		t.Errorf("redelivery: %d, annotation %s -> %s", code, before, f.annotation(t, ns, "cd"))
	}
	if n := len(logLines(f.logs, "cloudevent")); n < 9 {
		t.Errorf("%d cloudevent log lines", n)
	}
	if !strings.Contains(f.logs.String(), `"msg":"cloudevent"`) {
		t.Error("no cloudevent log line")
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withTypeMeta adds the apiVersion and kind that ApiServerSource sends and a typed Get leaves
// out.
func withTypeMeta(obj []byte) []byte {
	var m map[string]any
	_ = json.Unmarshal(obj, &m)
	m["apiVersion"] = "image.toolkit.fluxcd.io/v1"
	m["kind"] = "ImageRepository"
	b, _ := json.Marshal(m)
	return b
}

// TestCloudEventIntegrationDeletionReleasesFluxFinalizer: the ApiServerSource update that a
// deletion causes makes a repository holding Flux's finalizer due; the scan deletes its tags
// from the store and removes the finalizer, so the object goes. One holding only another
// finalizer is not due.
func TestCloudEventIntegrationDeletionReleasesFluxFinalizer(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace(t, "")
	f.reg.Push(t, "ce/deleted", "1.0.0")
	holders := map[string][]string{"flux": {v1.ImageFinalizer}, "other": {"example.com/keep"}}
	for name, finalizers := range holders {
		f.createRepo(t, ns, name, f.reg.Image("ce/deleted"), func(r *v1.ImageRepository) { r.Finalizers = finalizers })
		data, _ := json.Marshal(events.ObjectRef{Namespace: ns, Name: name, Reason: "never scanned"})
		if code, body := f.postEvent(t, false, events.TypeScanRequested, "scan-"+name, data); code != http.StatusAccepted {
			t.Fatalf("scan request: %d %s", code, body)
		}
	}
	id, err := reconcile.RepositoryIdentity(f.get(t, ns, "flux"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Get(t.Context(), reconcile.StoreKey(ns, "flux"), id); err != nil {
		t.Fatalf("no tags stored: %v", err)
	}
	listings := f.tagListings("")
	for name := range holders {
		if err := f.kube.Repositories.Delete(t.Context(), ns, name); err != nil {
			t.Fatal(err)
		}
		obj := withTypeMeta(mustJSON(t, f.get(t, ns, name)))
		if code, body := f.postEvent(t, true, events.TypeAPIServerUpdate, "delete-"+name, obj); code != http.StatusAccepted {
			t.Fatalf("update event of %s: %d %s", name, code, body)
		}
	}
	if _, err := f.kube.Repositories.Get(t.Context(), ns, "flux"); !apierrors.IsNotFound(err) {
		t.Errorf("the repository holding Flux's finalizer: %v, want it gone", err)
	}
	if _, err := f.store.Get(t.Context(), reconcile.StoreKey(ns, "flux"), id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("its store entry: %v, want none", err)
	}
	if r := f.get(t, ns, "other"); !slices.Equal(r.Finalizers, holders["other"]) {
		t.Errorf("the other repository's finalizers: %v", r.Finalizers)
	}
	if f.tagListings("") != listings {
		t.Error("a repository being deleted was scanned")
	}
	if !strings.Contains(f.logs.String(), `"finalizer_removed":"finalizers.fluxcd.io"`) {
		t.Error("no log line tells of the removal")
	}
}
