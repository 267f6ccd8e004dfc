package receiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/kube"
)

// receivers knows which namespaces have a receiver, and their tokens, from one listing of the
// Secrets named SecretName in every namespace (a metadata.name field selector, which RBAC can
// restrict to that name). The listing is renewed at most once per ttl, when a delivery needs it,
// and deliveries that arrive during a listing share it: however many namespace names a sender
// probes, the apiserver sees one list a period, and a namespace without a receiver costs nothing
// more than one with one. A failed listing is not remembered.
type receivers struct {
	kube     *kube.Client
	ttl      time.Duration
	pageSize int64
	now      func() time.Time

	// listing shares the listing in flight between deliveries.
	listing singleflight.Group
	mu      sync.Mutex
	current *secretListing
}

// secretListing is the last successful listing.
type secretListing struct {
	at     time.Time
	tokens map[string][]byte
}

func newReceivers(kc *kube.Client, ttl time.Duration, pageSize int64, now func() time.Time) *receivers {
	return &receivers{kube: kc, ttl: ttl, pageSize: pageSize, now: now}
}

// token returns the token of namespace's receiver, nil when the namespace has none.
func (c *receivers) token(ctx context.Context, namespace string) ([]byte, error) {
	c.mu.Lock()
	l := c.current
	c.mu.Unlock()
	if l == nil || c.now().Sub(l.at) >= c.ttl {
		ch := c.listing.DoChan("", func() (any, error) {
			at := c.now()
			// Other deliveries wait for this listing: a sender that hangs up must not fail it.
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listTimeout)
			defer cancel()
			tokens, err := c.list(lctx)
			if err != nil {
				return nil, err
			}
			l := &secretListing{at: at, tokens: tokens}
			c.mu.Lock()
			c.current = l
			c.mu.Unlock()
			return l, nil
		})
		select {
		case res := <-ch:
			if res.Err != nil {
				return nil, res.Err
			}
			l = res.Val.(*secretListing)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.tokens[namespace], nil
}

// list pages through the receiver Secrets of every namespace.
func (c *receivers) list(ctx context.Context) (map[string][]byte, error) {
	tokens := map[string][]byte{}
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + SecretName, Limit: c.pageSize}
	err := c.kube.Secrets.Pages(ctx, "", opts, func(page *corev1.SecretList) error {
		for _, s := range page.Items {
			if t := s.Data[SecretKey]; len(t) > 0 {
				tokens[s.Namespace] = t
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the %s Secrets: %w", SecretName, err)
	}
	return tokens, nil
}

// listTimeout bounds one listing of the receivers' Secrets.
const listTimeout = 30 * time.Second
