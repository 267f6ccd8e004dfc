package receiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// receivers knows which namespaces have a receiver, and their tokens, from one listing of the
// Secrets named SecretName in every namespace (a metadata.name field selector, which RBAC can
// restrict to that name). The listing is renewed at most once per ttl, when a delivery needs it,
// and deliveries that arrive during a listing share it: however many namespace names a sender
// probes, the apiserver sees one list a period, and a namespace without a receiver costs nothing
// more than one with one. A failed listing is not remembered.
type receivers struct {
	core     kubernetes.Interface
	ttl      time.Duration
	pageSize int64
	now      func() time.Time

	mu      sync.Mutex
	current *secretListing
}

// secretListing is one listing, in flight until done is closed.
type secretListing struct {
	at     time.Time
	done   chan struct{}
	tokens map[string][]byte
	err    error
}

func newReceivers(core kubernetes.Interface, ttl time.Duration, pageSize int64, now func() time.Time) *receivers {
	return &receivers{core: core, ttl: ttl, pageSize: pageSize, now: now}
}

// token returns the token of namespace's receiver, nil when the namespace has none.
func (c *receivers) token(ctx context.Context, namespace string) ([]byte, error) {
	c.mu.Lock()
	l := c.current
	if l != nil {
		select {
		case <-l.done:
			if l.err != nil || c.now().Sub(l.at) >= c.ttl {
				l = nil
			}
		default:
		}
	}
	if l == nil {
		l = &secretListing{at: c.now(), done: make(chan struct{})}
		c.current = l
		c.mu.Unlock()
		// Other deliveries wait for this listing: a sender that hangs up must not fail it.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listTimeout)
		l.tokens, l.err = c.list(lctx)
		cancel()
		close(l.done)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.err != nil {
		return nil, l.err
	}
	return l.tokens[namespace], nil
}

// list pages through the receiver Secrets of every namespace.
func (c *receivers) list(ctx context.Context) (map[string][]byte, error) {
	tokens := map[string][]byte{}
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + SecretName, Limit: c.pageSize}
	for {
		page, err := c.core.CoreV1().Secrets("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the %s Secrets: %w", SecretName, err)
		}
		for _, s := range page.Items {
			if t := s.Data[SecretKey]; len(t) > 0 {
				tokens[s.Namespace] = t
			}
		}
		if opts.Continue = page.Continue; opts.Continue == "" {
			return tokens, nil
		}
	}
}
