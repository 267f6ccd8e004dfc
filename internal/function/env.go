package function

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/fluxevent"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/tokenreview"
)

// Env is the part of a function's configuration that both functions read from the environment.
type Env struct {
	// StoreDir is $REFLECTOR_STORE_DIR, the tag store's directory.
	StoreDir string
	// Kube is a client for $KUBECONFIG, or the in-cluster service account.
	Kube *kube.Client
	// Sink delivers to $K_SINK as source; nil when K_SINK is unset.
	Sink *events.Sender
	// Senders proves who sent a CloudEvent: set when $REFLECTOR_OIDC_AUDIENCE is, and then
	// only requests with a ServiceAccount token for that audience (of a namespace in
	// $REFLECTOR_OIDC_NAMESPACES, comma-separated, when set) reach the function's cluster-local
	// surface. nil accepts every request.
	Senders *tokenreview.Verifier
	// FluxEvents posts Flux's events to $REFLECTOR_EVENTS_ADDR, notification-controller's event
	// receiver (what Flux's controllers take as --events-addr); nil when it is unset.
	FluxEvents *fluxevent.Poster
}

// FromEnv reads the environment that every function needs: the store directory (required), the
// Kubernetes client, the sink of the events it sends as source, and where Flux's events go.
func FromEnv(source string) (*Env, error) {
	dir := os.Getenv("REFLECTOR_STORE_DIR")
	if dir == "" {
		return nil, errors.New("REFLECTOR_STORE_DIR is required: the tag store directory")
	}
	cfg, err := kube.Config(os.Getenv("KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration: %w", err)
	}
	c, err := kube.New(cfg)
	if err != nil {
		return nil, err
	}
	// A process started for a request opens its connection while it starts serving.
	go c.Connect(context.Background())
	sink, err := events.NewSender(os.Getenv("K_SINK"), source, nil)
	if err != nil {
		return nil, fmt.Errorf("K_SINK: %w", err)
	}
	env := &Env{StoreDir: dir, Kube: c, Sink: sink}
	if aud := strings.TrimSpace(os.Getenv("REFLECTOR_OIDC_AUDIENCE")); aud != "" {
		env.Senders = tokenreview.New(c, aud,
			tokenreview.WithNamespaces(strings.Split(os.Getenv("REFLECTOR_OIDC_NAMESPACES"), ",")...))
	} else if os.Getenv("REFLECTOR_OIDC_NAMESPACES") != "" {
		return nil, errors.New("REFLECTOR_OIDC_NAMESPACES needs REFLECTOR_OIDC_AUDIENCE")
	}
	// Last, as it starts the Poster's sender.
	if env.FluxEvents, err = fluxevent.New(strings.TrimSpace(os.Getenv("REFLECTOR_EVENTS_ADDR"))); err != nil {
		return nil, fmt.Errorf("REFLECTOR_EVENTS_ADDR: %w", err)
	}
	return env, nil
}
