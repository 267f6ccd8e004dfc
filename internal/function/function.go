// Package function holds what reflector's two function packages and their entry points share:
// the health endpoint, what a function is once built from its environment, and its one shutdown
// path (stop taking requests, let those in flight finish, close what the handlers hold), taken
// both by the commands' own servers (Serve) and on a functions-framework-go host (Host).
package function

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/imagereflector/reflector/internal/metrics"
)

// Healthz answers GET and HEAD /healthz with 200 "ok".
func Healthz(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "GET /healthz", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// Function is a function built from its environment: its handlers, each under the name it is
// registered with functions-framework-go, and what closes what they hold.
type Function struct {
	// Handlers are the function's surfaces by registered name.
	Handlers map[string]http.Handler
	// Close closes what the handlers hold (the tag store, the event recorder), so that the next
	// process finds the store clean. It runs once no request is running; ctx ends when the
	// background work it waits for has had its grace period.
	Close func(ctx context.Context) error
}

// Timeouts bound a function's shutdown.
type Timeouts struct {
	// Drain is how long requests in flight may take after SIGTERM.
	Drain time.Duration
	// Grace is how long background work may take once the requests drained.
	Grace time.Duration
}

// DefaultTimeouts fit in Kubernetes' default termination grace period of 30 seconds.
var DefaultTimeouts = Timeouts{Drain: 20 * time.Second, Grace: 5 * time.Second}

// stopSignals are the signals that stop a function.
var stopSignals = []os.Signal{syscall.SIGTERM, os.Interrupt}

// closeWithin calls closeFn with a context that ends after grace.
func closeWithin(grace time.Duration, closeFn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return closeFn(ctx)
}

// DefaultMetricsPort is the port of /metrics when $REFLECTOR_METRICS_ADDR is unset. It is not
// the serving port, so that the function's public URL (which takes registry webhooks) does not
// expose metrics, and it is none of the ports of Knative's queue-proxy sidecar (8012, 8013,
// 8022, 8112, 9090, 9091), which shares the pod's network.
const DefaultMetricsPort = "9095"

// Listener is one address a function serves and the handler behind it.
type Listener struct {
	// Name says what the listener is for in log lines, e.g. "webhooks"; it is also the name
	// under which the process may inherit it (Listen).
	Name string
	// Addr is host:port, bound unless the process inherited a listener named Name.
	Addr string
	// Handler serves the listener's requests.
	Handler http.Handler
}

// PortAddr returns the address of port on $REFLECTOR_LISTEN_HOST (every interface when unset).
func PortAddr(port string) string {
	return net.JoinHostPort(os.Getenv("REFLECTOR_LISTEN_HOST"), port)
}

// Port returns $PORT, or 8080 when it is unset.
func Port() string {
	if p := os.Getenv("PORT"); p != "" {
		return p
	}
	return "8080"
}

// Serve serves each listener until SIGTERM or an interrupt. Then it stops taking requests on
// all of them, lets those in flight finish for up to t.Drain, and calls closeFn (a Function's
// Close) with t.Grace for background work. A listener that cannot be bound stops the function.
// Listeners the process inherited by socket activation are served in place of binding their
// addresses (Listen).
//
// Prometheus metrics are served on /metrics of $REFLECTOR_METRICS_ADDR (host:port, default
// ":" + DefaultMetricsPort; "off" serves none). A metrics port that cannot be bound is logged as
// an error and the function serves on without it.
func Serve(listeners []Listener, t Timeouts, closeFn func(context.Context) error, log *slog.Logger) error {
	if maddr := os.Getenv("REFLECTOR_METRICS_ADDR"); maddr != "off" {
		if maddr == "" {
			maddr = ":" + DefaultMetricsPort
		}
		ms, err := ServeMetrics(maddr, log)
		if err != nil {
			log.Error("metrics are not served", "error", err.Error())
		} else {
			defer ms.Close()
		}
	}
	var (
		servers []*http.Server
		lns     []net.Listener
	)
	for _, l := range listeners {
		ln, err := Listen(l.Name, l.Addr)
		if err != nil {
			for _, bound := range lns {
				bound.Close()
			}
			return errors.Join(fmt.Errorf("%s: %w", l.Name, err), closeWithin(t.Grace, closeFn))
		}
		lns = append(lns, ln)
		servers = append(servers, &http.Server{
			Handler:           l.Handler,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		})
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	served := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { served <- srv.Serve(lns[i]) }()
		log.Info("serving", "listener", listeners[i].Name, "addr", lns[i].Addr().String())
	}

	Release(ReleaseEvery(os.Getenv), ctx.Done())

	var failed error
	select {
	case failed = <-served:
	case <-ctx.Done():
		log.Info("shutting down")
	}
	dctx, cancel := context.WithTimeout(context.Background(), t.Drain)
	for _, srv := range servers {
		if err := srv.Shutdown(dctx); err != nil {
			log.Warn("requests still running at the drain deadline", "error", err.Error())
		}
	}
	cancel()
	err := closeWithin(t.Grace, closeFn)
	if failed != nil {
		return errors.Join(failed, err)
	}
	return err
}

// MetricsListener is the name of the metrics listener, for socket activation (Listen).
const MetricsListener = "metrics"

// ServeMetrics serves /metrics (and /healthz) on addr, or on the listener named
// MetricsListener that the process inherited, in the background until the returned server is
// closed. It fails only when addr cannot be bound.
func ServeMetrics(addr string, log *slog.Logger) (*http.Server, error) {
	ln, err := Listen(MetricsListener, addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler())
	mux.HandleFunc("/healthz", Healthz)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() { _ = srv.Serve(ln) }()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return srv, nil
}
