package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/imagereflector/reflector/functions/policy"
	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// function is the policy function served over real HTTP, over a real apiserver and a Badger
// directory that a read-write Store fills as the scan function would.
type function struct {
	url    string
	ns     string
	kube   *kube.Client
	writer *store.Store
	// id is the identity of the ImageRepository app that setup created.
	id store.Identity
}

func newFunction(t *testing.T) *function {
	t.Helper()
	env := testenv.Kube(t)
	c := env.Client(t)
	dir := t.TempDir()
	h := policy.NewHandler(&policy.Deps{
		Kube: c, Registry: registry.New(), Store: store.New(dir, store.ReadOnly()),
		Recorder: kube.NewRecorder(c, "reflector-policy"),
		Log:      slog.New(slog.NewJSONHandler(io.Discard, nil)),
		// The tests read outcomes from /evaluate; FromEnv serves it only behind sender proof.
		DebugEndpoints: true,
	})
	srv := httptest.NewServer(h)
	f := &function{url: srv.URL, ns: env.Namespace(t), kube: c, writer: store.New(dir, store.WithLinger(0))}
	t.Cleanup(func() {
		srv.Close()
		if err := h.Close(); err != nil {
			t.Error(err)
		}
		f.writer.Close()
	})
	return f
}

func (f *function) setup(t *testing.T, tags ...string) {
	t.Helper()
	ctx := context.Background()
	repo, err := f.kube.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "app"},
		Spec:       v1.ImageRepositorySpec{Image: "ghcr.io/org/app", Interval: metav1.Duration{Duration: time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.id, err = reconcile.RepositoryIdentity(repo); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"one", "two"} {
		_, err := f.kube.Policies.Create(ctx, &v1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
			Spec: v1.ImagePolicySpec{
				ImageRepositoryRef: v1.NamespacedObjectReference{Name: "app"},
				Policy:             v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "*"}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	f.put(t, tags...)
}

func (f *function) put(t *testing.T, tags ...string) {
	t.Helper()
	if _, _, err := f.writer.Put(context.Background(), reconcile.StoreKey(f.ns, "app"), f.id, tags, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func (f *function) get(t *testing.T, name string) *v1.ImagePolicy {
	t.Helper()
	p, err := f.kube.Policies.Get(context.Background(), f.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// latest returns the latest tag of a policy, "" when it has none.
func (f *function) latest(t *testing.T, name string) string {
	t.Helper()
	if ref := f.get(t, name).Status.LatestRef; ref != nil {
		return ref.Tag
	}
	return ""
}

// post sends a request and returns its status and body.
func (f *function) post(t *testing.T, path, contentType string, body []byte, header map[string]string) (int, string) {
	t.Helper()
	return post(t, f.url+path, contentType, body, header)
}

// post sends a request to url and returns its status and body.
func post(t *testing.T, url, contentType string, body []byte, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// structured posts one CloudEvent in structured mode.
func (f *function) structured(t *testing.T, typ string, data any) (int, string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"specversion": "1.0", "id": fmt.Sprint(time.Now().UnixNano()), "source": "/test", "type": typ,
		"datacontenttype": "application/json", "data": data,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f.post(t, "/", "application/cloudevents+json", body, nil)
}

func TestPolicyFunctionIntegrationHealthz(t *testing.T) {
	f := newFunction(t)
	resp, err := http.Get(f.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %s", resp.Status)
	}
}

// TestPolicyFunctionIntegrationTagsChangedBinary: the scan function's TagsChanged event, sent in
// binary mode by the events package's Sender, evaluates every policy of the repository.
func TestPolicyFunctionIntegrationTagsChangedBinary(t *testing.T) {
	f := newFunction(t)
	f.setup(t, "1.0.0", "1.1.0")
	snd, err := events.NewSender(f.url, events.SourceScan, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func() {
		t.Helper()
		err := snd.Send(context.Background(), events.TypeTagsChanged, f.ns+"/app",
			events.TagsChanged{Namespace: f.ns, Name: "app", Revision: "r"})
		if err != nil {
			t.Fatal(err)
		}
	}
	send()
	for _, name := range []string{"one", "two"} {
		if got := f.latest(t, name); got != "1.1.0" {
			t.Errorf("%s: latest %q, want 1.1.0", name, got)
		}
	}
	f.put(t, "1.0.0", "1.1.0", "1.2.0")
	send()
	if got := f.latest(t, "two"); got != "1.2.0" {
		t.Errorf("after new tags: latest %q, want 1.2.0", got)
	}
}

// TestPolicyFunctionIntegrationStructured: the cron reconciler's PolicyRequested and an
// ApiServerSource update, in structured mode; undecodable data is refused with 400 and an
// unknown type is acknowledged and ignored.
func TestPolicyFunctionIntegrationStructured(t *testing.T) {
	f := newFunction(t)
	f.setup(t, "1.0.0", "1.1.0")

	code, body := f.structured(t, events.TypePolicyRequested, events.ObjectRef{Namespace: f.ns, Name: "one", Reason: "retry"})
	if code != http.StatusAccepted || f.latest(t, "one") != "1.1.0" {
		t.Errorf("PolicyRequested: %d %s, latest %q", code, body, f.latest(t, "one"))
	}
	if got := f.latest(t, "two"); got != "" {
		t.Errorf("PolicyRequested for one evaluated two: %q", got)
	}

	// An update event whose generation was already handled (the echo of a status write) is
	// not due; one with a new generation is.
	f.put(t, "1.0.0", "1.1.0", "2.0.0")
	handled := f.get(t, "one")
	handled.Kind = v1.ImagePolicyKind
	if code, body := f.structured(t, "dev.knative.apiserver.resource.update", handled); code != http.StatusAccepted {
		t.Errorf("ApiServerSource update: %d %s", code, body)
	}
	if got := f.latest(t, "one"); got != "1.1.0" {
		t.Errorf("an update that was not due evaluated the policy: %q", got)
	}
	handled.Generation++
	if code, body := f.structured(t, "dev.knative.apiserver.resource.update", handled); code != http.StatusAccepted {
		t.Errorf("ApiServerSource update: %d %s", code, body)
	}
	if got := f.latest(t, "one"); got != "2.0.0" {
		t.Errorf("a new generation was not evaluated: %q", got)
	}
	added := f.get(t, "two")
	if code, body := f.structured(t, "dev.knative.apiserver.resource.add", added); code != http.StatusAccepted || f.latest(t, "two") != "2.0.0" {
		t.Errorf("ApiServerSource add: %d %s, latest %q", code, body, f.latest(t, "two"))
	}

	if code, body := f.structured(t, events.TypePolicyRequested, "not an object"); code != http.StatusBadRequest {
		t.Errorf("undecodable data: %d %s", code, body)
	}
	if code, body := f.structured(t, events.TypePolicyRequested, events.ObjectRef{Name: "one"}); code != http.StatusBadRequest {
		t.Errorf("data without a namespace: %d %s", code, body)
	}
	if code, body := f.structured(t, "com.example.unknown", map[string]string{"x": "y"}); code != http.StatusAccepted {
		t.Errorf("unknown type: %d %s", code, body)
	}
}

// TestPolicyFunctionIntegrationFluxFinalizer: the ApiServerSource update that the deletion of
// a policy holding Flux's finalizer causes is due, and its evaluation removes that finalizer,
// so the policy goes; a policy being deleted that holds only another finalizer is not touched.
func TestPolicyFunctionIntegrationFluxFinalizer(t *testing.T) {
	f := newFunction(t)
	f.setup(t, "1.0.0")
	ctx := context.Background()
	holders := map[string][]string{"one": {v1.ImageFinalizer}, "two": {"example.com/keep"}}
	for name, finalizers := range holders {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers}})
		if _, err := f.kube.Policies.Patch(ctx, f.ns, name, types.MergePatchType, patch); err != nil {
			t.Fatal(err)
		}
		if err := f.kube.Policies.Delete(ctx, f.ns, name); err != nil {
			t.Fatal(err)
		}
		deleting := f.get(t, name)
		deleting.Kind = v1.ImagePolicyKind
		if code, body := f.structured(t, "dev.knative.apiserver.resource.update", deleting); code != http.StatusAccepted {
			t.Fatalf("ApiServerSource update of %s: %d %s", name, code, body)
		}
	}
	if _, err := f.kube.Policies.Get(ctx, f.ns, "one"); !apierrors.IsNotFound(err) {
		t.Errorf("the policy holding Flux's finalizer: %v, want it gone", err)
	}
	if p := f.get(t, "two"); !slices.Equal(p.Finalizers, holders["two"]) || p.Status.LatestRef != nil {
		t.Errorf("the policy holding another finalizer: finalizers %v, latestRef %v", p.Finalizers, p.Status.LatestRef)
	}
}

// TestPolicyFunctionIntegrationHTTPForms: POST /evaluate and /evaluate-repository answer with
// the outcomes as JSON.
func TestPolicyFunctionIntegrationHTTPForms(t *testing.T) {
	f := newFunction(t)
	f.setup(t, "1.0.0", "1.1.0")

	code, body := f.post(t, "/evaluate?namespace="+f.ns+"&name=one", "", nil, nil)
	var out reconcile.PolicyOutcome
	if err := json.Unmarshal([]byte(body), &out); err != nil || code != http.StatusOK {
		t.Fatalf("POST /evaluate: %d %s (%v)", code, body, err)
	}
	if out.Result != reconcile.PolicySucceeded || out.Latest == nil || out.Latest.Tag != "1.1.0" || !out.Changed {
		t.Errorf("POST /evaluate: %+v", out)
	}

	code, body = f.post(t, "/evaluate-repository?namespace="+f.ns+"&name=app", "", nil, nil)
	var outs []reconcile.PolicyOutcome
	if err := json.Unmarshal([]byte(body), &outs); err != nil || code != http.StatusOK {
		t.Fatalf("POST /evaluate-repository: %d %s (%v)", code, body, err)
	}
	results := map[string]string{}
	for _, o := range outs {
		results[o.Name] = o.Result
	}
	if len(outs) != 2 || results["one"] != reconcile.PolicyUnchanged || results["two"] != reconcile.PolicySucceeded {
		t.Errorf("POST /evaluate-repository: %s", body)
	}
	p := f.get(t, "two")
	if ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition); ready == nil ||
		ready.Message != "Latest image tag for 'ghcr.io/org/app' resolved to 1.1.0" {
		t.Errorf("status of two: %+v", p.Status)
	}

	if code, _ := f.post(t, "/evaluate?namespace="+f.ns, "", nil, nil); code != http.StatusBadRequest {
		t.Errorf("POST /evaluate without a name: %d", code)
	}
	resp, err := http.Get(f.url + "/evaluate?namespace=" + f.ns + "&name=one")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /evaluate: %s", resp.Status)
	}
	if code, body := f.post(t, "/evaluate?namespace="+f.ns+"&name=missing", "", nil, nil); code != http.StatusOK || !strings.Contains(body, reconcile.PolicyNotFound) {
		t.Errorf("POST /evaluate of a missing policy: %d %s", code, body)
	}
}

// serveFromEnv serves the policy function configured from the environment, as its entry point
// does, over HTTP until the test ends, its log discarded.
func serveFromEnv(t *testing.T) *httptest.Server {
	t.Helper()
	d, err := policy.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	d.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	h := policy.NewHandler(d)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return srv
}

// TestPolicyFunctionIntegrationFromEnv: the function configured from the environment, as the
// entry point and functions-framework-go configure it.
func TestPolicyFunctionIntegrationFromEnv(t *testing.T) {
	env := testenv.Kube(t)
	t.Setenv("REFLECTOR_STORE_DIR", "")
	if _, err := policy.FromEnv(); err == nil || !strings.Contains(err.Error(), "REFLECTOR_STORE_DIR") {
		t.Errorf("without REFLECTOR_STORE_DIR: %v", err)
	}
	t.Setenv("REFLECTOR_STORE_DIR", t.TempDir())
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	t.Setenv("K_SINK", "")
	srv := serveFromEnv(t)
	ns := env.Namespace(t)
	code, body := postEvent(t, srv.URL, events.TypePolicyRequested, events.ObjectRef{Namespace: ns, Name: "none"})
	if code != http.StatusAccepted {
		t.Errorf("a policy request through the environment's apiserver: %d %s", code, body)
	}
	resp, err := http.Post(srv.URL+"/evaluate?namespace="+ns+"&name=none", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /evaluate without REFLECTOR_DEBUG_ENDPOINTS: %s, want 404", resp.Status)
	}
	// The endpoints that evaluate anything on request are served only to a proven caller.
	t.Setenv("REFLECTOR_DEBUG_ENDPOINTS", "true")
	if _, err := policy.FromEnv(); err == nil || !strings.Contains(err.Error(), "REFLECTOR_OIDC_AUDIENCE") {
		t.Errorf("REFLECTOR_DEBUG_ENDPOINTS without REFLECTOR_OIDC_AUDIENCE: %v", err)
	}
	t.Setenv("REFLECTOR_DEBUG_ENDPOINTS", "maybe")
	if _, err := policy.FromEnv(); err == nil || !strings.Contains(err.Error(), "REFLECTOR_DEBUG_ENDPOINTS") {
		t.Errorf("REFLECTOR_DEBUG_ENDPOINTS=maybe: %v", err)
	}
}

// postEvent posts one binary-mode CloudEvent of type typ with data to url.
func postEvent(t *testing.T, url, typ string, data any) (int, string) {
	t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return post(t, url+"/", "application/json", b, map[string]string{"Ce-Specversion": "1.0", "Ce-Type": typ,
		"Ce-Source": "/test", "Ce-Id": fmt.Sprint(time.Now().UnixNano())})
}

// TestPolicyFunctionIntegrationFluxEventsFromEnv: with REFLECTOR_EVENTS_ADDR, the function posts
// its Events to that address as Flux's events; an address that is no http(s) URL is refused.
func TestPolicyFunctionIntegrationFluxEventsFromEnv(t *testing.T) {
	env := testenv.Kube(t)
	got := make(chan eventv1.Event, 10)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e eventv1.Event
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- e
		w.WriteHeader(http.StatusAccepted)
	}))
	defer receiver.Close()
	t.Setenv("REFLECTOR_STORE_DIR", t.TempDir())
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	t.Setenv("K_SINK", "")
	t.Setenv("REFLECTOR_EVENTS_ADDR", "notification-controller.flux-system")
	if _, err := policy.FromEnv(); err == nil || !strings.Contains(err.Error(), "REFLECTOR_EVENTS_ADDR") {
		t.Errorf("with an events address that is no URL: %v", err)
	}
	t.Setenv("REFLECTOR_EVENTS_ADDR", receiver.URL+"/")
	srv := serveFromEnv(t)

	ns := env.Namespace(t)
	c := env.Client(t)
	if _, err := c.Policies.Create(context.Background(), &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan"},
		Spec: v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Name: "missing"},
			Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "^1"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := postEvent(t, srv.URL, events.TypePolicyRequested, events.ObjectRef{Namespace: ns, Name: "orphan"}); code != http.StatusAccepted {
		t.Errorf("a policy request: %d %s", code, body)
	}
	select {
	case e := <-got:
		o := e.InvolvedObject
		if o.Kind != v1.ImagePolicyKind || o.Namespace != ns || o.Name != "orphan" || o.APIVersion != v1.GroupVersion.String() ||
			e.Severity != eventv1.EventSeverityError || e.Reason != v1.DependencyNotReadyReason {
			t.Errorf("Flux event %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Flux event reached REFLECTOR_EVENTS_ADDR")
	}
}

// TestPolicyFunctionIntegrationNoCrossNamespaceRefsFromEnv: REFLECTOR_NO_CROSS_NAMESPACE_REFS=true
// makes the function refuse a policy that refers to another namespace, even to a repository whose
// accessFrom admits every namespace; a value that is not a boolean is refused at start.
func TestPolicyFunctionIntegrationNoCrossNamespaceRefsFromEnv(t *testing.T) {
	env := testenv.Kube(t)
	t.Setenv("REFLECTOR_STORE_DIR", t.TempDir())
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	t.Setenv("K_SINK", "")
	t.Setenv("REFLECTOR_NO_CROSS_NAMESPACE_REFS", "yes please")
	if _, err := policy.FromEnv(); err == nil || !strings.Contains(err.Error(), "REFLECTOR_NO_CROSS_NAMESPACE_REFS") {
		t.Errorf("with a value that is not a boolean: %v", err)
	}
	t.Setenv("REFLECTOR_NO_CROSS_NAMESPACE_REFS", "true")
	srv := serveFromEnv(t)

	ctx := context.Background()
	c := env.Client(t)
	shared, tenant := env.Namespace(t), env.Namespace(t)
	if _, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: shared, Name: "app"},
		Spec: v1.ImageRepositorySpec{Image: "ghcr.io/org/app", Interval: metav1.Duration{Duration: time.Hour},
			AccessFrom: &v1.AccessFrom{NamespaceSelectors: []v1.NamespaceSelector{{}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "app"},
		Spec: v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Namespace: shared, Name: "app"},
			Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "^1"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := postEvent(t, srv.URL, events.TypePolicyRequested, events.ObjectRef{Namespace: tenant, Name: "app"}); code != http.StatusAccepted {
		t.Errorf("a policy request for a cross-namespace policy: %d %s", code, body)
	}
	p, err := c.Policies.Get(ctx, tenant, "app")
	if err != nil {
		t.Fatal(err)
	}
	want := "cannot access 'ImageRepository/" + shared + "/app', cross-namespace references have been blocked"
	ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1.AccessDeniedReason || !strings.Contains(ready.Message, want) ||
		!apimeta.IsStatusConditionTrue(p.Status.Conditions, v1.StalledCondition) {
		t.Errorf("Ready %+v, Stalled %v; want False %s %q and Stalled", ready, apimeta.IsStatusConditionTrue(p.Status.Conditions, v1.StalledCondition), v1.AccessDeniedReason, want)
	}
}
