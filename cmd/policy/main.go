// Command policy serves the policy function (functions/policy) on $PORT (default 8080),
// configured from the environment as that package describes. It serves the function through a
// function.Host, as functions/policy's registration with functions-framework-go does, built at
// start (function.Host.Start), on its own http.Server rather than functions-framework-go's Start,
// so that on SIGTERM it stops accepting connections at once (function.Serve); then it lets the
// requests in flight finish and closes the recorder and the tag store (function.Host.Close), so
// the next process needs no log replay. Started by a supervisor that binds its ports, as
// systemd's socket activation does (LISTEN_FDS), it serves the listeners it is handed under the
// names policy and metrics instead of binding its own (function.Listen).
package main

import (
	"flag"
	"log/slog"
	"os"

	"github.com/imagereflector/reflector/functions/policy"
	"github.com/imagereflector/reflector/internal/function"
)

func main() {
	t := function.DefaultTimeouts
	flag.DurationVar(&t.Drain, "drain", t.Drain, "how long in-flight requests may take after SIGTERM")
	flag.Parse()
	log := function.Logger(os.Stderr)
	slog.SetDefault(log)
	if err := run(t, log); err != nil {
		log.Error("policy function failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(t function.Timeouts, log *slog.Logger) error {
	host := function.NewHost("policy", t, log, policy.Open)
	if err := host.Start(); err != nil {
		return err
	}
	return function.Serve([]function.Listener{{Name: "policy", Addr: function.PortAddr(function.Port()), Handler: host.Handler(policy.Target)}}, t, host.Close, log)
}
