// Command scan serves the scan function (functions/scan) on $PORT (default 8080), configured
// from the environment as that package describes: the public webhook surface, or with
// REFLECTOR_SURFACE=cloudevents the cluster-local CloudEvents surface. With
// REFLECTOR_CLOUDEVENTS_PORT set it serves the CloudEvents surface on that port too, so that one
// process serves both on separate listeners. It runs its own http.Server rather than
// functions-framework-go's Start, which has no graceful shutdown: on SIGTERM this one stops
// accepting requests, lets those in flight finish, gives background scans a bounded grace
// period, and then closes the recorder and the tag store, so the next process needs no log
// replay.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	listeners, err := listeners(h)
	if err != nil {
		return err
	}
	return function.Serve(listeners, drain, func(context.Context) error {
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

// listeners returns what the environment asks the process to serve.
func listeners(h *scan.Handler) ([]function.Listener, error) {
	port := function.PortAddr(function.Port())
	var ls []function.Listener
	switch surface := os.Getenv("REFLECTOR_SURFACE"); surface {
	case "", "webhooks":
		ls = append(ls, function.Listener{Name: "webhooks", Addr: port, Handler: h.Webhooks()})
	case "cloudevents":
		ls = append(ls, function.Listener{Name: "cloudevents", Addr: port, Handler: h.CloudEvents()})
	default:
		return nil, fmt.Errorf("REFLECTOR_SURFACE=%q: want webhooks or cloudevents", surface)
	}
	if p := os.Getenv("REFLECTOR_CLOUDEVENTS_PORT"); p != "" {
		if ls[0].Name == "cloudevents" {
			return nil, errors.New("REFLECTOR_CLOUDEVENTS_PORT is for a process whose $PORT serves webhooks")
		}
		ls = append(ls, function.Listener{Name: "cloudevents", Addr: function.PortAddr(p), Handler: h.CloudEvents()})
	}
	return ls, nil
}
