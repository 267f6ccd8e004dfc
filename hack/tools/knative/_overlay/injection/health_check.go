// This file replaces knative.dev/pkg/injection/health_check.go when hack/knative.sh builds
// Knative's programs (a copy of the module with this file in place). Knative serves its kubelet
// probes on port 8080, fixed; outside a pod several of its programs share one host, so here
// KNATIVE_PROBES_PORT moves the probe server, "off" turns it off, and KNATIVE_LISTEN_HOST names
// the host it listens on (every interface when unset). The API is the one the rest of Knative
// uses.

package injection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"knative.dev/pkg/logging"
)

// HealthCheckDefaultPort is where the probes listen unless KNATIVE_PROBES_PORT names another
// port.
const HealthCheckDefaultPort = 8080

// probesPortEnv moves the probe server; "off" turns it off.
const probesPortEnv = "KNATIVE_PROBES_PORT"

// ServeHealthProbes serves /readiness and /health until ctx ends.
func ServeHealthProbes(ctx context.Context, port int) error {
	switch v := os.Getenv(probesPortEnv); v {
	case "":
	case "off":
		<-ctx.Done()
		return nil
	default:
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			return fmt.Errorf("%s=%q is not a port", probesPortEnv, v)
		}
		port = p
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readiness", handler(ctx, addReadinessKey{}))
	mux.HandleFunc("/health", handler(ctx, addLivenessKey{}))
	server := http.Server{ReadHeaderTimeout: time.Minute, Handler: mux, Addr: net.JoinHostPort(os.Getenv("KNATIVE_LISTEN_HOST"), strconv.Itoa(port))}
	go func() {
		<-ctx.Done()
		_ = server.Shutdown(context.Background())
	}()
	logging.FromContext(ctx).Infof("Probes server listening on port %d", port)
	if err := server.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// handler is the probe a program registered under key, or one that fails once ctx ends.
func handler(ctx context.Context, key any) http.HandlerFunc {
	if h, ok := ctx.Value(key).(*http.HandlerFunc); ok {
		return *h
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		if ctx.Err() != nil {
			http.Error(w, "shutting down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

type addReadinessKey struct{}

// AddReadiness makes handlerFunc the readiness probe.
func AddReadiness(ctx context.Context, handlerFunc http.HandlerFunc) context.Context {
	return context.WithValue(ctx, addReadinessKey{}, &handlerFunc)
}

type addLivenessKey struct{}

// AddLiveness makes handlerFunc the liveness probe.
func AddLiveness(ctx context.Context, handlerFunc http.HandlerFunc) context.Context {
	return context.WithValue(ctx, addLivenessKey{}, &handlerFunc)
}
