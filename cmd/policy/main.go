// Command policy serves the policy function (functions/policy) on $PORT (default 8080),
// configured from the environment as that package describes. It runs its own http.Server
// rather than functions-framework-go's Start, which has no graceful shutdown: on SIGTERM this
// one stops accepting requests, lets those in flight finish, and then closes the recorder and
// the tag store, so the next process needs no log replay.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/imagereflector/reflector/functions/policy"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
)

func main() {
	drain := flag.Duration("drain", 20*time.Second, "how long in-flight requests may take after SIGTERM")
	flag.Parse()
	log := slog.New(redact.Handler(trace.Handler(slog.NewJSONHandler(os.Stderr, nil))))
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
	return function.Serve([]function.Listener{{Name: "policy", Addr: function.PortAddr(function.Port()), Handler: h}}, drain, func(context.Context) error { return h.Close() }, log)
}
