package tokenreview_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
	"github.com/imagereflector/reflector/internal/tokenreview"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// countingClient returns a client of env whose TokenReview requests are counted in n.
func countingClient(t *testing.T, env *testenv.Env, n *atomic.Int64) *kube.Client {
	t.Helper()
	return env.ClientSeeing(t, nil, func(req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/tokenreviews") {
			n.Add(1)
		}
	})
}

// token returns a token of ServiceAccount namespace/sender for audiences.
func token(t *testing.T, env *testenv.Env, namespace string, audiences ...string) string {
	t.Helper()
	ctx := context.Background()
	core := clientset.For(env).CoreV1()
	if _, err := core.ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sender"}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	tr, err := core.ServiceAccounts(namespace).CreateToken(ctx, "sender", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// TestVerifierIntegration checks tokens with the real apiserver's TokenReview: only a
// ServiceAccount token for the audience, of an allowed namespace, passes; each distinct token
// costs one review.
func TestVerifierIntegration(t *testing.T) {
	env := testenv.Kube(t)
	allowed, other := env.Namespace(t), env.Namespace(t)
	var reviews atomic.Int64
	v := tokenreview.New(countingClient(t, env, &reviews), "reflector-scan", tokenreview.WithNamespaces(allowed))
	ctx := context.Background()

	good := token(t, env, allowed, "reflector-scan", "reflector-policy")
	user, err := v.Verify(ctx, "Bearer "+good)
	if err != nil || user != "system:serviceaccount:"+allowed+":sender" {
		t.Fatalf("a valid token: %q, %v", user, err)
	}
	for range 10 {
		if _, err := v.Verify(ctx, "Bearer "+good); err != nil {
			t.Fatal(err)
		}
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("11 checks of one token cost %d TokenReviews, want 1", n)
	}

	for name, auth := range map[string]string{
		"no header":           "",
		"not bearer":          "Basic " + good,
		"garbage":             "Bearer garbage",
		"another audience":    "Bearer " + token(t, env, allowed, "somebody-else"),
		"another namespace":   "Bearer " + token(t, env, other, "reflector-scan"),
		"the apiserver's own": "Bearer " + token(t, env, allowed),
	} {
		_, err := v.Verify(ctx, auth)
		if !errors.Is(err, tokenreview.ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
		if err != nil && strings.Contains(err.Error(), good) {
			t.Errorf("%s: the error repeats the token", name)
		}
	}
	// A refused token is remembered too.
	before := reviews.Load()
	for range 5 {
		_, _ = v.Verify(ctx, "Bearer garbage")
	}
	if n := reviews.Load() - before; n != 0 {
		t.Errorf("a refused token was reviewed %d more times", n)
	}

	// Require: only the valid token reaches the handler, which learns whose it is.
	reached := 0
	var sender string
	srv := httptest.NewServer(v.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		sender, _ = tokenreview.Sender(r.Context())
	})))
	defer srv.Close()
	for auth, want := range map[string]int{"": http.StatusUnauthorized, "Bearer garbage": http.StatusUnauthorized, "Bearer " + good: http.StatusOK} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %.20q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
	if reached != 1 {
		t.Errorf("the handler ran %d times, want 1", reached)
	}
	if sender != "system:serviceaccount:"+allowed+":sender" {
		t.Errorf("Sender = %q, want the token's ServiceAccount", sender)
	}
}

// TestVerifierIntegrationBoundsReviews: a flood of distinct tokens that the cluster did issue,
// for the audience and an allowed namespace, costs at most the review budget; the rest are
// answered without asking the apiserver.
func TestVerifierIntegrationBoundsReviews(t *testing.T) {
	env := testenv.Kube(t)
	ns := env.Namespace(t)
	var reviews atomic.Int64
	v := tokenreview.New(countingClient(t, env, &reviews), "reflector-scan", tokenreview.WithNamespaces(ns), tokenreview.WithReviewRate(1, 5))
	busy := 0
	for range 30 {
		_, err := v.Verify(context.Background(), "Bearer "+token(t, env, ns, "reflector-scan"))
		if err != nil && !errors.Is(err, tokenreview.ErrUnauthenticated) {
			busy++
		}
	}
	if n := reviews.Load(); n > 6 {
		t.Errorf("30 distinct tokens cost %d TokenReviews, want at most 6", n)
	}
	if busy == 0 {
		t.Error("no token was turned away for the review budget")
	}
}

// TestVerifierIntegrationForged: tokens that the cluster's keys did not sign, and genuine ones
// of a namespace that may not send, are refused without a TokenReview, even with no review
// budget left; the key set is read once.
func TestVerifierIntegrationForged(t *testing.T) {
	env := testenv.Kube(t)
	allowed, tenant := env.Namespace(t), env.Namespace(t)
	var reviews, keyReads atomic.Int64
	c := env.ClientSeeing(t, nil, func(req *http.Request) {
		switch {
		case strings.HasSuffix(req.URL.Path, "/tokenreviews"):
			reviews.Add(1)
		case req.URL.Path == "/openid/v1/jwks":
			keyReads.Add(1)
		}
	})
	v := tokenreview.New(c, "reflector-webhook", tokenreview.WithNamespaces(allowed), tokenreview.WithReviewRate(1, 1))
	ctx := context.Background()
	good := token(t, env, allowed, "reflector-webhook")
	forger, err := testenv.NewForger(good)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		forged, err := forger.Token(map[string]any{
			"aud": []string{"reflector-webhook"}, "sub": "system:serviceaccount:" + allowed + ":sender",
			"iss": env.APIServerURL, "exp": time.Now().Add(time.Hour).Unix(), "jti": strconv.Itoa(i),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(ctx, "Bearer "+forged); !errors.Is(err, tokenreview.ErrUnauthenticated) {
			t.Fatalf("forged token %d: %v, want ErrUnauthenticated", i, err)
		}
	}
	for i := range 10 {
		if _, err := v.Verify(ctx, "Bearer "+token(t, env, tenant, "reflector-webhook")); !errors.Is(err, tokenreview.ErrUnauthenticated) {
			t.Fatalf("a tenant's genuine token %d: %v, want ErrUnauthenticated", i, err)
		}
	}
	if n := reviews.Load(); n != 0 {
		t.Errorf("forged and tenants' tokens cost %d TokenReviews, want 0", n)
	}
	if user, err := v.Verify(ctx, "Bearer "+good); err != nil || user != "system:serviceaccount:"+allowed+":sender" {
		t.Errorf("the genuine token after the flood: %q, %v", user, err)
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("TokenReviews = %d, want 1 (the genuine token)", n)
	}
	if n := keyReads.Load(); n != 1 {
		t.Errorf("the key set was read %d times, want 1", n)
	}
}
