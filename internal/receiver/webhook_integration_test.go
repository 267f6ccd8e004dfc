package receiver_test

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/testenv"
)

const token = "s3cr3t-t0ken"

// providerCases are the vendors' documented payloads (internal/webhook/testdata) and the
// image and tag each one announces. The payloads keep their registry hosts; the fixture's
// registry client reaches the test registry under every host.
var providerCases = []struct {
	provider, image, repo, tag string
}{
	{"acr", "myregistry.azurecr.io/hello-world", "hello-world", "v1"},
	{"distribution", "registrycluster.local/library/test", "library/test", "latest"},
	{"dockerhub", "svendowideit/testhook", "svendowideit/testhook", "latest"},
	{"ecr", "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-repository-name", "my-repository-name", "latest"},
	{"eventgrid", "demo.azurecr.io/group1/testrepo", "group1/testrepo", "v1"},
	{"gar", "us-east1-docker.pkg.dev/my-project/my-repo/hello-world", "my-project/my-repo/hello-world", "1.1"},
	{"generic", "ghcr.io/example/app", "example/app", "v1.2.3"},
	{"github", "ghcr.io/codertocat/hello-world", "codertocat/hello-world", "latest"},
	{"harbor", "hub.harbor.com/test-webhook/debian", "test-webhook/debian", "latest"},
	{"jfrog", "example.jfrog.io/docker-remote-cache/library/ubuntu", "docker-remote-cache/library/ubuntu", "latest"},
	{"nexus", "nexus.example.com:8082/app1/alpine", "app1/alpine", "3.4"},
	{"quay", "quay.io/mynamespace/repository", "mynamespace/repository", "latest"},
}

// TestWebhookIntegrationProviders sends each provider's documented payload to a namespace's
// receiver: forged and unsigned deliveries change nothing, the authentic one is answered 202
// after the annotation is stored, the scan then puts the pushed tag in the status, and a
// repeat of the delivery changes nothing.
func TestWebhookIntegrationProviders(t *testing.T) {
	f := newFixture(t, receiver.WithRateLimit(rate.Inf, 0))
	if got := len(providerCases); got != len(webhookProviders()) {
		t.Fatalf("%d provider cases for %d providers", got, len(webhookProviders()))
	}
	for _, tc := range providerCases {
		t.Run(tc.provider, func(t *testing.T) {
			ns := f.namespace(t, token)
			f.reg.Push(t, tc.repo, "0.0.1", tc.tag)
			f.createRepo(t, ns, "app", tc.image)
			path := "/hook/" + tc.provider + "/" + ns
			body := testdata(t, tc.provider)

			forged := signed(tc.provider, path, "not-the-token", body)
			if code, a := f.send(t, forged); code != http.StatusUnauthorized || len(a.Objects) != 0 {
				t.Fatalf("forged: %d %+v", code, a)
			}
			unsigned := signed(tc.provider, path, token, body)
			for _, h := range []string{"X-Hub-Signature-256", "X-Nexus-Webhook-Signature", "X-JFrog-Event-Auth", "Authorization", "X-Signature"} {
				unsigned.header.Del(h)
			}
			unsigned.query.Del("token")
			if code, a := f.send(t, unsigned); code != http.StatusUnauthorized {
				t.Fatalf("unsigned: %d %+v", code, a)
			}
			if r := f.get(t, ns, "app"); r.Annotations[v1.ReconcileRequestAnnotation] != "" || r.Status.LastScanResult != nil {
				t.Fatalf("a rejected delivery changed the object: %v %+v", r.Annotations, r.Status)
			}

			code, a := f.send(t, signed(tc.provider, path, token, body))
			if code != http.StatusAccepted || fmt.Sprint(a.Objects) != fmt.Sprintf("[{%s app}]", ns) || a.DeliveryID == "" {
				t.Fatalf("authentic: %d %+v", code, a)
			}
			requested := f.annotation(t, ns, "app")
			if requested == "" {
				t.Fatal("answered 202 without the annotation")
			}
			r := f.waitTag(t, ns, "app", tc.tag)
			if r.Status.LastScanResult.TagCount != 2 {
				t.Errorf("status %+v", r.Status.LastScanResult)
			}
			waitHandled(t, f, ns, "app", requested)

			code, a = f.send(t, signed(tc.provider, path, token, body))
			if code != http.StatusOK || a.Message != "duplicate delivery" || f.annotation(t, ns, "app") != requested {
				t.Errorf("repeat: %d %+v", code, a)
			}
		})
	}
	// Tokens in query strings never reach the log; every answer was one line.
	if strings.Contains(f.logs.String(), token) {
		t.Error("the log contains the token")
	}
	if n := len(logLines(f.logs, "webhook")); n != 4*len(providerCases) {
		t.Errorf("%d webhook log lines for %d answers", n, 4*len(providerCases))
	}
}

func webhookProviders() []string {
	var out []string
	for _, tc := range providerCases {
		out = append(out, tc.provider)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestWebhookIntegrationAnswers covers the answers that are not about a match.
func TestWebhookIntegrationAnswers(t *testing.T) {
	f := newFixture(t, receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(t, token)
	bare := f.namespace(t, "")
	f.createRepo(t, ns, "app", "ghcr.io/example/app")
	generic := testdata(t, "generic")
	path := "/hook/generic/" + ns

	cases := []struct {
		name string
		d    delivery
		code int
		says string
	}{
		{"malformed", signed("generic", path, token, []byte(`{"image": `)), http.StatusBadRequest, "malformed"},
		{"not an image", signed("generic", path, token, []byte(`{"image": "UPPER CASE"}`)), http.StatusBadRequest, "malformed"},
		{"unknown provider", signed("generic", "/hook/gitea/"+ns, token, generic), http.StatusNotFound, "unknown provider"},
		// A receiver that does not exist answers as a wrong token does.
		{"namespace without Secret", signed("generic", "/hook/generic/"+bare, token, generic), http.StatusUnauthorized, "generic: unauthenticated: X-Signature does not match"},
		{"cluster receiver not configured", signed("generic", "/hook/generic", token, generic), http.StatusUnauthorized, "generic: unauthenticated: X-Signature does not match"},
		{"wrong token", signed("generic", path, "not-the-token", generic), http.StatusUnauthorized, "generic: unauthenticated: X-Signature does not match"},
		{"bad namespace", signed("generic", "/hook/generic/Not_A_Namespace", token, generic), http.StatusNotFound, "no such receiver"},
		{"too deep", signed("generic", path+"/x", token, generic), http.StatusNotFound, "no such receiver"},
		{"GET", delivery{path: path, method: http.MethodGet}, http.StatusMethodNotAllowed, "POSTed"},
		{"over 1 MiB", signed("generic", path, token, bytes.Repeat([]byte(" "), receiver.MaxBodyBytes+1)), http.StatusRequestEntityTooLarge, "larger than"},
		{"pull ignored", signed("distribution", "/hook/distribution/"+ns, token,
			[]byte(`{"events":[{"id":"p1","action":"pull","target":{"repository":"example/app","tag":"v1"},"request":{"host":"ghcr.io"}}]}`)),
			http.StatusOK, "ignored"},
		{"no match", signed("generic", path, token, []byte(`{"image":"ghcr.io/example/other","tag":"v1"}`)), http.StatusOK, "no ImageRepository matches ghcr.io/example/other"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, a := f.send(t, tc.d)
			if code != tc.code || !strings.Contains(a.Message, tc.says) || len(a.Objects) != 0 {
				t.Errorf("%d %+v, want %d %q", code, a, tc.code, tc.says)
			}
		})
	}
	if f.annotation(t, ns, "app") != "" {
		t.Error("an unmatched or rejected delivery annotated the repository")
	}
}

// TestWebhookIntegrationRateLimit: a receiver over its rate is answered 429 with Retry-After;
// another receiver has its own bucket.
func TestWebhookIntegrationRateLimit(t *testing.T) {
	f := newFixture(t, receiver.WithRateLimit(0.001, 2))
	ns := f.namespace(t, token)
	other := f.namespace(t, token)
	body := func(i int) []byte { return fmt.Appendf(nil, `{"image":"ghcr.io/example/none","tag":"v%d"}`, i) }
	for i := range 2 {
		if code, a := f.send(t, signed("generic", "/hook/generic/"+ns, token, body(i))); code != http.StatusOK {
			t.Fatalf("delivery %d: %d %+v", i, code, a)
		}
	}
	if code, a := f.send(t, signed("generic", "/hook/generic/"+ns, token, body(3))); code != http.StatusTooManyRequests {
		t.Fatalf("over the rate: %d %+v", code, a)
	}
	// Forged deliveries do not spend the bucket of the other receiver.
	for range 5 {
		f.send(t, signed("generic", "/hook/generic/"+other, "wrong", body(9)))
	}
	if code, a := f.send(t, signed("generic", "/hook/generic/"+other, token, body(4))); code != http.StatusOK {
		t.Fatalf("other receiver: %d %+v", code, a)
	}
}

// TestWebhookIntegrationScope: a namespace's receiver touches its namespace only, the cluster
// receiver every namespace; suspended repositories are left alone.
func TestWebhookIntegrationScope(t *testing.T) {
	const clusterToken = "cluster-t0ken"
	f := newFixture(t, receiver.WithClusterSecret([]byte(clusterToken)), receiver.WithRateLimit(rate.Inf, 0))
	a, b := f.namespace(t, token), f.namespace(t, "another-token")
	f.reg.Push(t, "scope/app", "1.0.0")
	image := f.reg.Image("scope/app")
	f.createRepo(t, a, "app", image)
	f.createRepo(t, b, "app", image)
	f.createRepo(t, a, "paused", image, func(r *v1.ImageRepository) { r.Spec.Suspend = true })

	push := []byte(fmt.Sprintf(`{"image":%q,"tag":"1.0.0"}`, image))
	code, ans := f.send(t, signed("generic", "/hook/generic/"+a, token, push))
	if code != http.StatusAccepted || fmt.Sprint(ans.Objects) != fmt.Sprintf("[{%s app}]", a) {
		t.Fatalf("namespaced: %d %+v", code, ans)
	}
	if f.annotation(t, b, "app") != "" || f.annotation(t, a, "paused") != "" {
		t.Fatal("the namespaced receiver touched another namespace or a suspended repository")
	}
	// b's token does not open a's receiver.
	if code, _ := f.send(t, signed("generic", "/hook/generic/"+a, "another-token", []byte(`{"image":"x/y"}`))); code != http.StatusUnauthorized {
		t.Fatalf("another namespace's token: %d", code)
	}

	// The sender's spelling of the repository differs in case; the match key folds it.
	push = []byte(fmt.Sprintf(`{"image":%q,"tag":"1.0.0"}`, f.reg.Host()+"/Scope/App"))
	code, ans = f.send(t, signed("generic", "/hook/generic", clusterToken, push))
	want := []receiver.Object{{Namespace: a, Name: "app"}, {Namespace: b, Name: "app"}}
	if code != http.StatusAccepted || !sameObjects(ans.Objects, want) {
		t.Fatalf("cluster: %d %+v, want %+v", code, ans, want)
	}
	for _, o := range want {
		f.waitTag(t, o.Namespace, o.Name, "1.0.0")
	}
	if f.annotation(t, a, "paused") != "" {
		t.Error("the cluster receiver touched a suspended repository")
	}
}

func sameObjects(got, want []receiver.Object) bool {
	key := func(o receiver.Object) string { return o.Namespace + "/" + o.Name }
	g, w := make([]string, len(got)), make([]string, len(want))
	for i := range got {
		g[i] = key(got[i])
	}
	for i := range want {
		w[i] = key(want[i])
	}
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

// waitHandled waits until the status of ns/name records the reconcile request token.
func waitHandled(t testing.TB, f *fixture, ns, name, token string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := f.get(t, ns, name).Status.LastHandledReconcileAt; got != token {
			return fmt.Errorf("%s/%s: lastHandledReconcileAt is %q, want %s", ns, name, got, token)
		}
		return nil
	})
}

// TestWebhookIntegrationReceiversAcrossPages: the listing of the receivers' Secrets follows the
// apiserver's continue tokens, so a receiver on any page opens.
func TestWebhookIntegrationReceiversAcrossPages(t *testing.T) {
	f := newFixture(t, receiver.WithPageSize(1), receiver.WithRateLimit(rate.Inf, 0))
	tokens := map[string]string{}
	for i := range 3 {
		tok := fmt.Sprintf("page-t0ken-%d", i)
		tokens[f.namespace(t, tok)] = tok
	}
	body := []byte(`{"image":"ghcr.io/example/none","tag":"v1"}`)
	for ns, tok := range tokens {
		if code, a := f.send(t, signed("generic", "/hook/generic/"+ns, tok, body)); code != http.StatusOK {
			t.Errorf("receiver of %s: %d %+v", ns, code, a)
		}
		if code, _ := f.send(t, signed("generic", "/hook/generic/"+ns, "wrong", body)); code != http.StatusUnauthorized {
			t.Errorf("receiver of %s with a wrong token: %d", ns, code)
		}
	}
}
