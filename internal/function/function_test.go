package function

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/testenv"
)

// handlerFunction is a Function with one surface, "f", served by h.
func handlerFunction(h http.HandlerFunc, closeFn func(context.Context) error) *Function {
	return &Function{Handlers: map[string]http.Handler{"f": h}, Close: closeFn}
}

func noClose(context.Context) error { return nil }

func TestHostBuildsOnFirstUseAndRetriesFailures(t *testing.T) {
	builds := 0
	fail := true
	host := NewHost("test", DefaultTimeouts, func() (*Function, error) {
		builds++
		if fail {
			return nil, errors.New("REFLECTOR_STORE_DIR is not set")
		}
		return handlerFunction(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }, noClose), nil
	})
	srv := httptest.NewServer(host.Handler("f"))
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

func TestHostHidesURLUserinfo(t *testing.T) {
	var logged strings.Builder
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logged, nil)))
	host := NewHost("test", DefaultTimeouts, func() (*Function, error) {
		return nil, errors.New(`K_SINK: target "http://user:planted-password@broker/" is not reachable`)
	})
	rec := httptest.NewRecorder()
	host.Handler("f")(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "http://xxxxx@broker/") {
		t.Errorf("answer %d %q", rec.Code, rec.Body)
	}
	for where, text := range map[string]string{"answer": rec.Body.String(), "log": logged.String()} {
		if strings.Contains(text, "planted-password") {
			t.Errorf("the %s shows the password: %s", where, text)
		}
	}
}

// Shutdown lets the request in flight finish, turns new ones away, and closes the function
// only after the last request, with the grace period for its background work.
func TestHostShutdownDrainsThenCloses(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var closed atomic.Bool
	var graceLeft time.Duration
	host := NewHost("test", Timeouts{Drain: 10 * time.Second, Grace: 3 * time.Second}, func() (*Function, error) {
		return handlerFunction(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path != "/slow" {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			close(entered)
			<-release
			if closed.Load() {
				t.Error("the function was closed under a running request")
			}
			w.WriteHeader(http.StatusAccepted)
		}, func(ctx context.Context) error {
			closed.Store(true)
			deadline, _ := ctx.Deadline()
			graceLeft = time.Until(deadline)
			return errors.New("store: close failed")
		}), nil
	})
	srv := httptest.NewServer(host.Handler("f"))
	defer srv.Close()

	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/slow", "text/plain", nil)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- host.Shutdown() }()

	testenv.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Post(srv.URL+"/", "text/plain", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("a new request during shutdown: %d, want 503", resp.StatusCode)
		}
		return nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	if code := <-answered; code != http.StatusAccepted {
		t.Errorf("the request in flight: %d, want 202", code)
	}
	if err := <-stopped; err == nil || !strings.Contains(err.Error(), "close failed") {
		t.Errorf("Shutdown = %v, want the close error", err)
	}
	if !closed.Load() || graceLeft <= 0 || graceLeft > 3*time.Second {
		t.Errorf("closed %v with %v of grace left, want up to 3s", closed.Load(), graceLeft)
	}
	if err := host.Shutdown(); err == nil {
		t.Error("a second Shutdown forgot the first one's error")
	}
}
