// Package function holds what reflector's two function packages and their entry points share:
// the health endpoint, a handler built on first use for functions-framework-go, and serving with
// the graceful shutdown that functions-framework-go's Start lacks.
package function

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
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

// Lazy returns the handler that a function package registers with functions-framework-go: it
// answers /healthz by itself and builds the real handler on the first other request, so that
// importing the package has no side effects. A failed build answers 500 with the reason and is
// tried again on the next request, so a fixed environment needs no restart.
func Lazy(name string, build func() (http.Handler, error)) http.HandlerFunc {
	var (
		mu sync.Mutex
		h  http.Handler
	)
	get := func() (http.Handler, error) {
		mu.Lock()
		defer mu.Unlock()
		if h != nil {
			return h, nil
		}
		built, err := build()
		if err != nil {
			return nil, err
		}
		h = built
		return h, nil
	}
	return func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/healthz" {
			Healthz(w, req)
			return
		}
		h, err := get()
		if err != nil {
			slog.Error(name+" function is not configured", "error", err.Error())
			http.Error(w, name+" function is not configured: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, req)
	}
}

// Serve serves h on $PORT (default 8080) until SIGTERM or an interrupt. Then it stops taking
// requests, lets those in flight finish for up to drain, and calls shutdown, which closes what
// the handler holds (the tag store, the event recorder) so that the next process finds the
// store clean.
func Serve(h http.Handler, drain time.Duration, shutdown func(context.Context) error, log *slog.Logger) error {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	srv := &http.Server{
		Addr:              net.JoinHostPort("", port),
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Info("serving", "addr", srv.Addr)

	select {
	case err := <-served:
		return errors.Join(err, shutdown(context.Background()))
	case <-ctx.Done():
	}
	log.Info("shutting down")
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	err := srv.Shutdown(dctx)
	cancel()
	if err != nil {
		log.Warn("requests still running at the drain deadline", "error", err.Error())
	}
	if err := shutdown(context.Background()); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
