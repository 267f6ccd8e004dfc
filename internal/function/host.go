package function

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/imagereflector/reflector/internal/redact"
)

// Host is the one way a function is hosted: its Handlers are what a functions-framework-go host
// serves (registered with functions.HTTP) and what the commands serve on their own listeners
// (cmd/scan, cmd/policy, through Serve). It counts the requests in, and Shutdown stops taking
// them, lets those in flight finish and closes the function.
//
// On a functions-framework-go host the function is built on the first request that is not
// /healthz, so that importing a function package has no side effects. A failed build answers
// 500 with the reason and is tried again on the next request, so a fixed environment needs no
// restart. That host's server (funcframework.Start) neither drains requests nor closes anything
// when the process is told to stop, so a Host built that way shuts itself down on SIGTERM or an
// interrupt and ends the process. A command builds it at once instead (Start), failing at start
// on a bad environment, and its Serve shuts the Host down once its servers have drained.
//
// The Host logs as the commands do: it hands its logger to the function it builds, writes its
// own lines through it, and before the first build makes it the process's default
// (slog.SetDefault), as the commands do when they start, so that what logs through
// slog.Default() writes the same redacted JSON lines with trace ids.
type Host struct {
	name     string
	timeouts Timeouts
	log      *slog.Logger
	open     func(*slog.Logger) (*Function, error)

	mu       sync.Mutex
	fn       *Function
	stopping bool
	inflight sync.WaitGroup
	stopped  sync.Once
	closed   error
}

// errStopping is what a request that arrives after SIGTERM gets.
var errStopping = errors.New("shutting down")

// NewHost returns a Host of the function name that open builds with the Host's logger, shut
// down within t. log nil means Logger(os.Stderr), the commands' logger.
func NewHost(name string, t Timeouts, log *slog.Logger, open func(*slog.Logger) (*Function, error)) *Host {
	if log == nil {
		log = Logger(os.Stderr)
	}
	return &Host{name: name, timeouts: t, log: log, open: open}
}

// Handler returns the handler to register with functions-framework-go under target, one of the
// names of the function's Handlers. It answers /healthz without building the function.
func (h *Host) Handler(target string) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/healthz" {
			Healthz(w, req)
			return
		}
		fn, err := h.enter()
		switch {
		case errors.Is(err, errStopping):
			w.Header().Set("Connection", "close")
			http.Error(w, h.name+" function is shutting down", http.StatusServiceUnavailable)
			return
		case err != nil:
			// Configuration errors may quote K_SINK or the API server's URL.
			msg := redact.String(err.Error())
			h.log.ErrorContext(req.Context(), h.name+" function is not configured", "error", msg)
			http.Error(w, h.name+" function is not configured: "+msg, http.StatusInternalServerError)
			return
		}
		defer h.inflight.Done()
		handler, ok := fn.Handlers[target]
		if !ok {
			http.Error(w, h.name+" function has no surface "+target, http.StatusInternalServerError)
			return
		}
		handler.ServeHTTP(w, req)
	}
}

// enter counts a request in, building the function first if it is not built yet.
func (h *Host) enter() (*Function, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return nil, errStopping
	}
	if h.fn == nil {
		if err := h.build(); err != nil {
			return nil, err
		}
		// Before the first request is served, so that a SIGTERM during it is not lost.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, stopSignals...)
		go h.stopOnSignal(sig)
	}
	h.inflight.Add(1)
	return h.fn, nil
}

// Start builds the function now, for a process that serves the Host's handlers itself and
// shuts it down on its own signal (Serve, with Shutdown as the function's close): a bad
// environment then fails the start, and what the function starts (its watches) runs before the
// first request.
func (h *Host) Start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fn != nil {
		return nil
	}
	return h.build()
}

// Close stops taking requests (later ones get 503) and closes the function within ctx, without
// a drain of its own: for a process whose servers have let the requests in flight finish
// (Serve). Shutdown is the drain and then the close.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	h.stopping = true
	fn := h.fn
	h.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn.Close(ctx)
}

// build builds the function; h.mu is held.
func (h *Host) build() error {
	slog.SetDefault(h.log)
	fn, err := h.open(h.log)
	if err != nil {
		return err
	}
	h.fn = fn
	return nil
}

// stopOnSignal shuts the Host down on the first signal and ends the process, which the host's
// own server would otherwise keep running.
func (h *Host) stopOnSignal(sig chan os.Signal) {
	<-sig
	signal.Stop(sig)
	h.log.Info("shutting down", "function", h.name)
	if err := h.Shutdown(); err != nil {
		h.log.Error(h.name+" function failed", "error", redact.String(err.Error()))
		os.Exit(1)
	}
	os.Exit(0)
}

// Shutdown stops taking requests (later ones get 503), lets those in flight finish for up to
// the drain timeout, and closes the function, giving its background work the grace timeout.
// SIGTERM runs it; later calls return what the first returned.
func (h *Host) Shutdown() error {
	h.stopped.Do(func() {
		h.mu.Lock()
		h.stopping = true
		fn := h.fn
		h.mu.Unlock()
		if fn == nil {
			return
		}
		drained := make(chan struct{})
		go func() {
			h.inflight.Wait()
			close(drained)
		}()
		timer := time.NewTimer(h.timeouts.Drain)
		defer timer.Stop()
		select {
		case <-drained:
		case <-timer.C:
			h.log.Warn("requests still running at the drain deadline", "function", h.name)
		}
		h.closed = closeWithin(h.timeouts.Grace, fn.Close)
	})
	return h.closed
}
