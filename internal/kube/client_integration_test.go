package kube_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// Connect leaves an open connection that the next request takes: the request dials nothing.
func TestConnectIntegrationOpensTheConnectionOfTheNextRequest(t *testing.T) {
	env := testenv.Kube(t)
	cfg := rest.CopyConfig(env.Config)
	var dials atomic.Int32
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c.Connect(ctx)
	if n := dials.Load(); n != 1 {
		t.Fatalf("Connect dialled %d times, want 1", n)
	}
	if _, err := c.Core.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the request after Connect dialled again: %d dials in all, want 1", n)
	}
}
