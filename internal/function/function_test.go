package function

import (
	"context"
	"encoding/json"
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
	"github.com/imagereflector/reflector/internal/trace"
)

// handlerFunction is a Function with one surface, "f", served by h.
func handlerFunction(h http.HandlerFunc, closeFn func(context.Context) error) *Function {
	return &Function{Handlers: map[string]http.Handler{"f": h}, Close: closeFn}
}

func noClose(context.Context) error { return nil }

// newHost returns a Host of open that logs to the returned buffer through Logger, and gives the
// process its default logger back when the test ends, since building makes the Host's the default.
func newHost(t *testing.T, timeouts Timeouts, open func() (*Function, error)) (*Host, *testenv.LogBuffer) {
	t.Helper()
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	logged := &testenv.LogBuffer{}
	return NewHost("test", timeouts, Logger(logged), func(*slog.Logger) (*Function, error) { return open() }), logged
}

func TestHostBuildsOnFirstUseAndRetriesFailures(t *testing.T) {
	builds := 0
	fail := true
	host, _ := newHost(t, DefaultTimeouts, func() (*Function, error) {
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
	host, logged := newHost(t, DefaultTimeouts, func() (*Function, error) {
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

// The function a Host builds logs through the Host's logger, and so does what logs through
// slog.Default() once it is built: JSON lines, URL userinfo masked, the request's trace id added.
func TestHostLogsThroughItsLogger(t *testing.T) {
	const sink = "http://user:planted-password@broker/"
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	logged := &testenv.LogBuffer{}
	var got *slog.Logger
	host := NewHost("test", DefaultTimeouts, Logger(logged), func(log *slog.Logger) (*Function, error) {
		got = log
		return handlerFunction(func(w http.ResponseWriter, req *http.Request) {
			ctx := trace.Continue(req.Context(), req.Header.Get(trace.Header))
			log.InfoContext(ctx, "handled", "sink", sink)
			slog.WarnContext(ctx, "default", "error", errors.New("posting to "+sink+": refused"))
			w.WriteHeader(http.StatusAccepted)
		}, noClose), nil
	})
	tc := trace.New()
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set(trace.Header, tc.String())
	rec := httptest.NewRecorder()
	host.Handler("f")(rec, req)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("answer %d %q", rec.Code, rec.Body)
	}
	if got != host.log {
		t.Error("the function was not built with the Host's logger")
	}
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the function's line and the default logger's, got:\n%s", logged)
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON line (%v): %s", err, line)
			continue
		}
		if strings.Contains(line, "planted-password") || !strings.Contains(line, "http://xxxxx@broker/") {
			t.Errorf("userinfo not masked: %s", line)
		}
		if rec["trace_id"] != tc.TraceIDString() {
			t.Errorf("trace_id %v, want %s: %s", rec["trace_id"], tc.TraceIDString(), line)
		}
	}
}

// Shutdown lets the request in flight finish, turns new ones away, and closes the function
// only after the last request, with the grace period for its background work.
func TestHostShutdownDrainsThenCloses(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var closed atomic.Bool
	var graceLeft time.Duration
	host, _ := newHost(t, Timeouts{Drain: 10 * time.Second, Grace: 3 * time.Second}, func() (*Function, error) {
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

// Start builds the function before any request, as the commands do, and fails on a bad
// environment; Close then turns requests away and closes the function within its context.
func TestHostStartBuildsAtOnceAndCloseStops(t *testing.T) {
	broken, _ := newHost(t, DefaultTimeouts, func() (*Function, error) {
		return nil, errors.New("REFLECTOR_STORE_DIR is not set")
	})
	if err := broken.Start(); err == nil || !strings.Contains(err.Error(), "REFLECTOR_STORE_DIR") {
		t.Errorf("Start of a bad environment = %v", err)
	}

	builds := 0
	var closedWith error
	host, _ := newHost(t, DefaultTimeouts, func() (*Function, error) {
		builds++
		return handlerFunction(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) },
			func(ctx context.Context) error {
				closedWith = ctx.Err()
				return nil
			}), nil
	})
	if err := host.Start(); err != nil || builds != 1 {
		t.Fatalf("Start = %v after %d builds, want one build", err, builds)
	}
	srv := httptest.NewServer(host.Handler("f"))
	defer srv.Close()
	post := func() int {
		t.Helper()
		resp, err := http.Post(srv.URL+"/", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(); code != http.StatusAccepted || builds != 1 {
		t.Errorf("a request after Start: %d after %d builds, want 202 and no second build", code, builds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := host.Close(ctx); err != nil || closedWith != nil {
		t.Errorf("Close = %v, the function closed with context error %v", err, closedWith)
	}
	cancel()
	if code := post(); code != http.StatusServiceUnavailable {
		t.Errorf("a request after Close: %d, want 503", code)
	}
}
