package kube_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	if _, err := c.Namespaces.Get(ctx, "", "default"); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the request after Connect dialled again: %d dials in all, want 1", n)
	}
}

// The built-in resources reflector uses answer through the Client: errors stay the apiserver's
// (apierrors tells them apart), a ServiceAccount's token is issued and reviewed, and every
// request carries the configured user agent.
func TestCoreClientsIntegration(t *testing.T) {
	env := testenv.Kube(t)
	ns := env.Namespace(t)
	var mu sync.Mutex
	agents := map[string]string{}
	c := env.ClientSeeing(t, func(cfg *rest.Config) { cfg.UserAgent = "reflector-test" }, func(req *http.Request) {
		mu.Lock()
		agents[req.Method+" "+req.URL.Path] = req.UserAgent()
		mu.Unlock()
	})
	ctx := context.Background()

	if _, err := c.Secrets.Get(ctx, ns, "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("reading a missing Secret: %v, want NotFound", err)
	}
	got, err := c.Namespaces.Get(ctx, "", ns)
	if err != nil || got.Name != ns {
		t.Fatalf("reading namespace %s: %v, %v", ns, got.Name, err)
	}
	if _, err := c.ServiceAccounts.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sender"}}); err != nil {
		t.Fatal(err)
	}
	sa, err := c.ServiceAccounts.Get(ctx, ns, "sender")
	if err != nil || sa.UID == "" {
		t.Fatalf("reading the ServiceAccount: %+v, %v", sa, err)
	}
	if _, err := c.ServiceAccounts.CreateToken(ctx, ns, "nobody", &authnv1.TokenRequest{}); !apierrors.IsNotFound(err) {
		t.Errorf("a token of a missing ServiceAccount: %v, want NotFound", err)
	}
	tr, err := c.ServiceAccounts.CreateToken(ctx, ns, "sender", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{"reflector-test"}},
	})
	if err != nil || tr.Status.Token == "" {
		t.Fatalf("requesting a token: %v", err)
	}
	review, err := c.TokenReviews.Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: tr.Status.Token, Audiences: []string{"reflector-test"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":sender"; !review.Status.Authenticated || review.Status.User.Username != want {
		t.Errorf("the review: %+v, want %s authenticated", review.Status, want)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{
		"GET /api/v1/namespaces/" + ns + "/secrets/missing",
		"GET /api/v1/namespaces/" + ns,
		"POST /api/v1/namespaces/" + ns + "/serviceaccounts/sender/token",
		"POST /apis/authentication.k8s.io/v1/tokenreviews",
	} {
		if ua, ok := agents[want]; !ok || ua != "reflector-test" {
			t.Errorf("%s: sent %v with user agent %q, want reflector-test", want, ok, ua)
		}
	}
}
