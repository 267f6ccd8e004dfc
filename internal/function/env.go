package function

import (
	"errors"
	"fmt"
	"os"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
)

// Env is the part of a function's configuration that both functions read from the environment.
type Env struct {
	// StoreDir is $REFLECTOR_STORE_DIR, the tag store's directory.
	StoreDir string
	// Kube is a client for $KUBECONFIG, or the in-cluster service account.
	Kube *kube.Client
	// Sink delivers to $K_SINK as source; nil when K_SINK is unset.
	Sink *events.Sender
}

// FromEnv reads the environment that every function needs: the store directory (required), the
// Kubernetes client, and the sink of the events it sends as source.
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
	sink, err := events.NewSender(os.Getenv("K_SINK"), source, nil)
	if err != nil {
		return nil, fmt.Errorf("K_SINK: %w", err)
	}
	return &Env{StoreDir: dir, Kube: c, Sink: sink}, nil
}
