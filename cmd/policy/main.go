// Command policy serves the policy function (functions/policy) on $PORT (default 8080),
// configured from the environment as that package describes. It runs its own http.Server
// rather than functions-framework-go's Start, which has no graceful shutdown: on SIGTERM this
// one stops accepting requests, lets those in flight finish, and then closes the recorder and
// the tag store, so the next process needs no log replay.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/imagereflector/reflector/functions/policy"
)

func main() {
	drain := flag.Duration("drain", 20*time.Second, "how long in-flight requests may take after SIGTERM")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	if err := run(*drain, log); err != nil {
		log.Error("policy function failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(drain time.Duration, log *slog.Logger) error {
	deps, err := policy.FromEnv()
	if err != nil {
		return err
	}
	deps.Log = log
	h := policy.NewHandler(deps)
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
		_ = h.Close()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	err = srv.Shutdown(dctx)
	cancel()
	if err != nil {
		log.Warn("requests still running at the drain deadline", "error", err.Error())
	}
	if err := h.Close(); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
