package receiver_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
)

// options sends an OPTIONS request to path with the given headers and returns the answer's
// status and headers.
func (f *fixture) options(t *testing.T, path string, header map[string]string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodOptions, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// TestEventGridIntegrationHandshake: Event Grid's CloudEvents handshake is answered on its
// paths only, without a token and alike whether the receiver exists, with the origin that asked
// and the receiver's rate; a missing or oversized origin gets no consent; the handshakes spend
// the remote address's budget of unauthenticated requests.
func TestEventGridIntegrationHandshake(t *testing.T) {
	f := newFixture(t, receiver.WithRateLimit(2, 5), receiver.WithUnauthenticatedLimit(0.001, 8))
	ns := f.namespace(t, token)
	bare := f.namespace(t, "")
	origin := map[string]string{"WebHook-Request-Origin": "eventgrid.azure.net", "WebHook-Request-Rate": "120"}

	// The receiver, a namespace without one, and the cluster receiver (not configured here)
	// give the same consent.
	for _, path := range []string{"/hook/eventgrid/" + ns, "/hook/eventgrid/" + bare, "/hook/eventgrid"} {
		code, h := f.options(t, path, origin)
		if code != http.StatusOK || h.Get("WebHook-Allowed-Origin") != "eventgrid.azure.net" || h.Get("WebHook-Allowed-Rate") != "120" || h.Get("Allow") != "OPTIONS, POST" {
			t.Errorf("OPTIONS %s: %d %v", path, code, h)
		}
	}
	refused := []struct {
		name, path string
		header     map[string]string
		code       int
	}{
		{"no origin", "/hook/eventgrid/" + ns, nil, http.StatusBadRequest},
		{"huge origin", "/hook/eventgrid/" + ns, map[string]string{"WebHook-Request-Origin": strings.Repeat("a", 64<<10)}, http.StatusBadRequest},
		{"origin not a name", "/hook/eventgrid/" + ns, map[string]string{"WebHook-Request-Origin": "https://evil.example/x"}, http.StatusBadRequest},
		{"another provider", "/hook/acr/" + ns, origin, http.StatusMethodNotAllowed},
	}
	for _, tc := range refused {
		code, h := f.options(t, tc.path, tc.header)
		if code != tc.code || h.Get("WebHook-Allowed-Origin") != "" {
			t.Errorf("%s: %d %v, want %d without consent", tc.name, code, h, tc.code)
		}
	}
	// Three consents and three refusals spent six of eight; the 405 cost nothing.
	if code, _ := f.options(t, "/hook/eventgrid/"+ns, origin); code != http.StatusOK {
		t.Fatalf("seventh handshake: %d", code)
	}
	f.options(t, "/hook/eventgrid/"+ns, origin)
	if code, h := f.options(t, "/hook/eventgrid/"+ns, origin); code != http.StatusTooManyRequests || h.Get("WebHook-Allowed-Origin") != "" {
		t.Errorf("over the budget: %d %v", code, h)
	}
	if code, a := f.send(t, delivery{path: "/hook/eventgrid/" + ns, method: http.MethodGet}); code != http.StatusMethodNotAllowed || !strings.Contains(a.Message, "POSTed") {
		t.Errorf("GET: %d %+v", code, a)
	}
	if strings.Contains(f.logs.String(), strings.Repeat("a", 300)) {
		t.Error("the log repeats the oversized origin")
	}
}

// TestEventGridIntegrationBatch: a batch of CloudEvents is authenticated before it is read,
// asks for a scan of each pushed repository, leaves other event types out, and is recognised
// again by its events' ids when Event Grid sends them once more in another batch.
func TestEventGridIntegrationBatch(t *testing.T) {
	f := newFixture(t, receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(t, token)
	f.reg.Push(t, "team/api", "0.0.1", "v2")
	f.reg.Push(t, "team/web", "0.0.1", "v3")
	f.createRepo(t, ns, "api", "demo.azurecr.io/team/api")
	f.createRepo(t, ns, "web", "demo.azurecr.io/team/web")
	path := "/hook/eventgrid/" + ns
	event := func(id, typ, repository, tag string) string {
		return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/subscriptions/x/resourceGroups/g/providers/Microsoft.ContainerRegistry/registries/demo","type":%q,`+
			`"data":{"id":%q,"action":"push","target":{"repository":%q,"tag":%q},"request":{"host":"demo.azurecr.io"}}}`, id, typ, id, repository, tag)
	}
	api := event("e-1", "Microsoft.ContainerRegistry.ImagePushed", "team/api", "v2")
	web := event("e-2", "Microsoft.ContainerRegistry.ImagePushed", "team/web", "v3")
	deleted := event("e-3", "Microsoft.ContainerRegistry.ImageDeleted", "team/web", "v1")
	batch := func(events ...string) delivery {
		d := signed("eventgrid", path, token, []byte("["+strings.Join(events, ",")+"]"))
		d.header.Set("Content-Type", "application/cloudevents-batch+json; charset=utf-8")
		return d
	}

	if code, a := f.send(t, signed("eventgrid", path, "not-the-token", []byte("[not json"))); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %+v", code, a)
	}
	code, a := f.send(t, batch(api, deleted, web))
	names := make([]string, len(a.Objects))
	for i, o := range a.Objects {
		names[i] = o.Namespace + "/" + o.Name
	}
	slices.Sort(names)
	if code != http.StatusAccepted || strings.Join(names, " ") != ns+"/api "+ns+"/web" || a.DeliveryID != "e-1 (+1)" {
		t.Fatalf("batch: %d %+v", code, a)
	}
	f.waitTag(t, ns, "api", "v2")
	f.waitTag(t, ns, "web", "v3")
	requested := f.annotation(t, ns, "api")

	// The same events in another batch are the same delivery.
	if code, a := f.send(t, batch(web, api)); code != http.StatusOK || a.Message != "duplicate delivery" || f.annotation(t, ns, "api") != requested {
		t.Errorf("the same events again: %d %+v", code, a)
	}
	if code, a := f.send(t, batch(deleted)); code != http.StatusOK || !strings.Contains(a.Message, "ignored") {
		t.Errorf("a delete alone: %d %+v", code, a)
	}
	if code, a := f.send(t, batch(api, `{"specversion":"1.0","type":"Microsoft.ContainerRegistry.ImagePushed"}`)); code != http.StatusBadRequest {
		t.Errorf("an event without id: %d %+v", code, a)
	}
	over := make([]string, 101)
	for i := range over {
		over[i] = api
	}
	if code, a := f.send(t, batch(over...)); code != http.StatusBadRequest || !strings.Contains(a.Message, "more than 100") {
		t.Errorf("over the batch bound: %d %+v", code, a)
	}
}
