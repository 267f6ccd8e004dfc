// Command scan serves the scan function (functions/scan) on $PORT (default 8080), configured
// from the environment as that package describes. It runs its own http.Server rather than
// functions-framework-go's Start, which has no graceful shutdown: on SIGTERM this one stops
// accepting requests, lets those in flight finish, gives background scans a bounded grace
// period, and then closes the recorder and the tag store, so the next process needs no log
// replay.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/imagereflector/reflector/functions/scan"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
)

func main() {
	drain := flag.Duration("drain", 20*time.Second, "how long in-flight requests may take after SIGTERM")
	grace := flag.Duration("grace", 5*time.Second, "how long background scans may take after the requests drained")
	flag.Parse()
	log := slog.New(redact.Handler(trace.Handler(slog.NewJSONHandler(os.Stderr, nil))))
	slog.SetDefault(log)
	if err := run(*drain, *grace, log); err != nil {
		log.Error("scan function failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(drain, grace time.Duration, log *slog.Logger) error {
	deps, err := scan.FromEnv()
	if err != nil {
		return err
	}
	deps.Log = log
	h := scan.NewHandler(deps)
	return function.Serve(h, drain, func(context.Context) error {
		gctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err := h.Shutdown(gctx)
		if errors.Is(err, context.DeadlineExceeded) {
			log.Warn("background scans cut short; the cron reconciler completes them", "error", err.Error())
			return nil
		}
		return err
	}, log)
}
