package function

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLazyBuildsOnFirstUseAndRetriesFailures(t *testing.T) {
	builds := 0
	fail := true
	h := Lazy("test", func() (http.Handler, error) {
		builds++
		if fail {
			return nil, errors.New("REFLECTOR_STORE_DIR is not set")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }), nil
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/healthz"); code != http.StatusOK || builds != 0 {
		t.Errorf("healthz: %d after %d builds; it must answer without building", code, builds)
	}
	if code := get("/"); code != http.StatusInternalServerError {
		t.Errorf("failed build answered %d", code)
	}
	fail = false
	if code := get("/"); code != http.StatusAccepted {
		t.Errorf("after the environment was fixed: %d", code)
	}
	get("/")
	if builds != 2 {
		t.Errorf("%d builds, want 2: one failed, one kept", builds)
	}
	resp, err := http.Post(srv.URL+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d", resp.StatusCode)
	}
}

func TestLazyHidesURLUserinfo(t *testing.T) {
	var logged strings.Builder
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logged, nil)))
	h := Lazy("test", func() (http.Handler, error) {
		return nil, errors.New(`K_SINK: target "http://user:planted-password@broker/" is not reachable`)
	})
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "http://xxxxx@broker/") {
		t.Errorf("answer %d %q", rec.Code, rec.Body)
	}
	for where, text := range map[string]string{"answer": rec.Body.String(), "log": logged.String()} {
		if strings.Contains(text, "planted-password") {
			t.Errorf("the %s shows the password: %s", where, text)
		}
	}
}
