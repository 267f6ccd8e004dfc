// Command scan serves the scan function (functions/scan) on $PORT (default 8080), configured from
// the environment as that package describes: the public webhook surface, or with
// REFLECTOR_SURFACE=cloudevents the cluster-local CloudEvents surface. With
// REFLECTOR_CLOUDEVENTS_PORT set it serves the CloudEvents surface on that port too, so that one
// process serves both on separate listeners. It serves the function through a function.Host, as
// functions/scan's registration with functions-framework-go does, built at start
// (function.Host.Start), on its own http.Server rather than functions-framework-go's Start, so
// that on SIGTERM it stops accepting connections at once (function.Serve); then it lets the
// requests in flight finish, gives background scans a bounded grace period, and closes the
// recorder and the tag store (function.Host.Close), so the next process needs no log replay.
// Started by a supervisor that binds its ports, as systemd's socket activation does (LISTEN_FDS),
// it serves the listeners it is handed under the names webhooks, cloudevents and metrics instead
// of binding its own (function.Listen).
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/imagereflector/reflector/functions/scan"
	"github.com/imagereflector/reflector/internal/function"
)

func main() {
	t := function.DefaultTimeouts
	flag.DurationVar(&t.Drain, "drain", t.Drain, "how long in-flight requests may take after SIGTERM")
	flag.DurationVar(&t.Grace, "grace", t.Grace, "how long background scans may take after the requests drained")
	flag.Parse()
	log := function.Logger(os.Stderr)
	slog.SetDefault(log)
	if err := run(t, log); err != nil {
		log.Error("scan function failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(t function.Timeouts, log *slog.Logger) error {
	surface := os.Getenv("REFLECTOR_SURFACE")
	if surface != "" && surface != "webhooks" && surface != "cloudevents" {
		return fmt.Errorf("REFLECTOR_SURFACE=%q: want webhooks or cloudevents", surface)
	}
	if os.Getenv("REFLECTOR_CLOUDEVENTS_PORT") != "" && surface == "cloudevents" {
		return errors.New("REFLECTOR_CLOUDEVENTS_PORT is for a process whose $PORT serves webhooks")
	}
	host := function.NewHost("scan", t, log, scan.Open)
	if err := host.Start(); err != nil {
		return err
	}
	return function.Serve(listeners(host, surface), t, host.Close, log)
}

// listeners returns what the environment asks the process to serve: surface on $PORT and, with
// REFLECTOR_CLOUDEVENTS_PORT set, the CloudEvents surface on that port.
func listeners(host *function.Host, surface string) []function.Listener {
	port := function.PortAddr(function.Port())
	if surface == "cloudevents" {
		return []function.Listener{{Name: "cloudevents", Addr: port, Handler: host.Handler(scan.ScanTarget)}}
	}
	ls := []function.Listener{{Name: "webhooks", Addr: port, Handler: host.Handler(scan.WebhookTarget)}}
	if p := os.Getenv("REFLECTOR_CLOUDEVENTS_PORT"); p != "" {
		ls = append(ls, function.Listener{Name: "cloudevents", Addr: function.PortAddr(p), Handler: host.Handler(scan.ScanTarget)})
	}
	return ls
}
