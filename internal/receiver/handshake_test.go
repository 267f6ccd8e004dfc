package receiver_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
)

// TestHandshake answers Event Grid's handshake over real HTTP without an apiserver: the
// handshake reads no Secret, so none is needed. The allowed rate is the receiver's a minute.
func TestHandshake(t *testing.T) {
	quiet := receiver.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)))
	for _, tc := range []struct {
		name  string
		limit rate.Limit
		want  string
	}{
		{"default", receiver.DefaultRate, "600"},
		{"below one a minute", 0.001, "1"},
		{"unlimited", rate.Inf, "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(receiver.New(nil, nil, quiet, receiver.WithRateLimit(tc.limit, 1)))
			defer srv.Close()
			code, h := do(t, http.MethodOptions, srv.URL+"/hook/eventgrid/team-a", "eventgrid.azure.net")
			if code != http.StatusOK || h.Get("WebHook-Allowed-Origin") != "eventgrid.azure.net" || h.Get("WebHook-Allowed-Rate") != tc.want {
				t.Errorf("%d %v, want consent at rate %s", code, h, tc.want)
			}
		})
	}
	srv := httptest.NewServer(receiver.New(nil, nil, quiet))
	defer srv.Close()
	for _, tc := range []struct {
		method, path, origin string
		code                 int
		allow                string
	}{
		{http.MethodOptions, "/hook/eventgrid", "eventgrid.azure.us", http.StatusOK, "OPTIONS, POST"},
		{http.MethodOptions, "/hook/eventgrid/team-a", "", http.StatusBadRequest, "OPTIONS, POST"},
		{http.MethodOptions, "/hook/eventgrid/team-a", "eventgrid.azure.net\tx", http.StatusBadRequest, "OPTIONS, POST"},
		{http.MethodOptions, "/hook/eventgrid/team-a", "-eventgrid.azure.net", http.StatusBadRequest, "OPTIONS, POST"},
		{http.MethodGet, "/hook/eventgrid/team-a", "eventgrid.azure.net", http.StatusMethodNotAllowed, "OPTIONS, POST"},
		{http.MethodOptions, "/hook/acr/team-a", "eventgrid.azure.net", http.StatusMethodNotAllowed, "POST"},
		{http.MethodOptions, "/hook/gitea/team-a", "eventgrid.azure.net", http.StatusMethodNotAllowed, "POST"},
		{http.MethodOptions, "/hook/eventgrid/Team_A", "eventgrid.azure.net", http.StatusNotFound, ""},
	} {
		code, h := do(t, tc.method, srv.URL+tc.path, tc.origin)
		consent := h.Get("WebHook-Allowed-Origin") != ""
		if code != tc.code || h.Get("Allow") != tc.allow || consent != (code == http.StatusOK) {
			t.Errorf("%s %s with origin %q: %d %v, want %d, Allow %q", tc.method, tc.path, tc.origin, code, h, tc.code, tc.allow)
		}
	}
}

func do(t *testing.T, method, url, origin string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("WebHook-Request-Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}
