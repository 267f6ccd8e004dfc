package scan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/functions/scan"
	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/tokenreview"
)

// The audiences of knative/: the Triggers of ImageRepository events ask for webhookAudience,
// the others for the cluster-local function's.
const (
	webhookAudience = "reflector-webhook"
	scanAudience    = "reflector-scan"
)

// serviceAccountToken returns a token of a new ServiceAccount of namespace for audiences, issued
// by the apiserver's TokenRequest as Knative's token provider issues a Trigger's.
func serviceAccountToken(t *testing.T, c *kube.Client, namespace string, audiences ...string) string {
	t.Helper()
	ctx := context.Background()
	sa, err := c.ServiceAccounts.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "sender-"}})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.ServiceAccounts.CreateToken(ctx, namespace, sa.Name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// repositoryEvent returns a binary-mode request of the ApiServerSource's event ceType about
// repo, whose data is the whole object as in Resource mode, with authorization when not empty.
func repositoryEvent(t *testing.T, url, ceType, id string, repo *v1.ImageRepository, authorization string) *http.Request {
	t.Helper()
	obj := repo.DeepCopy()
	obj.APIVersion, obj.Kind = v1.GroupVersion.String(), v1.ImageRepositoryKind
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Ce-Specversion": "1.0", "Ce-Type": ceType, "Ce-Source": "https://kubernetes.default", "Ce-Id": id,
		"Ce-Kind": v1.ImageRepositoryKind, "Content-Type": "application/json",
	} {
		req.Header.Set(k, v)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	return req
}

// answer sends req and returns the status code of the answer.
func answer(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestScanFunctionIntegrationBrokerPathWithoutSenders: a public surface that cannot prove a
// sender takes no CloudEvent at all: /broker does not exist.
func TestScanFunctionIntegrationBrokerPathWithoutSenders(t *testing.T) {
	f := newFunction(t)
	f.createRepo(t, "app", "127.0.0.1:1/none/app")
	repo, err := f.kube.Repositories.Get(context.Background(), f.ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if code := answer(t, repositoryEvent(t, f.hooks.URL+scan.BrokerPath, events.TypeAPIServerAdd, "1", repo, "")); code != http.StatusNotFound {
		t.Fatalf("an ImageRepository event on the public surface without a Verifier: %d, want 404", code)
	}
	if got, _ := f.kube.Repositories.Get(context.Background(), f.ns, "app"); got.Status.LastScanResult != nil || len(got.Status.Conditions) > 0 {
		t.Fatalf("the refused event changed the status: %+v", got.Status)
	}
}

// TestScanFunctionIntegrationBrokerPath serves the public surface as knative/'s reflector-webhook
// runs it, requiring the Broker's tokens for its own audience from the Triggers' namespace: a
// CloudEvent without such a token is refused before its body is read and changes nothing; with
// one, an ImageRepository's add, a spec edit and `flux reconcile`'s annotation each reach a scan
// at once, and no other type of event is served there.
func TestScanFunctionIntegrationBrokerPath(t *testing.T) {
	env := testenv.Kube(t)
	admin := env.Client(t)
	brokerNS, otherNS := env.Namespace(t), env.Namespace(t)
	f := serveFunction(t, func(c *kube.Client) *tokenreview.Verifier {
		return tokenreview.New(c, webhookAudience, tokenreview.WithNamespaces(brokerNS))
	})
	reg := testenv.NewRegistry(t)
	reg.Push(t, "broker/app", "1.0.0")
	f.createRepo(t, "app", reg.Image("broker/app"))
	ctx := context.Background()
	repo, err := f.kube.Repositories.Get(ctx, f.ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	url := f.hooks.URL + scan.BrokerPath
	broker := "Bearer " + serviceAccountToken(t, admin, brokerNS, webhookAudience)
	unscanned := func(attack string) {
		t.Helper()
		got, err := f.kube.Repositories.Get(ctx, f.ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.LastScanResult != nil || len(got.Status.Conditions) > 0 {
			t.Fatalf("%s changed the status: %+v", attack, got.Status)
		}
	}

	for name, auth := range map[string]string{
		"no token":                       "",
		"garbage":                        "Bearer not.a.jwt",
		"the cluster-local function's":   "Bearer " + serviceAccountToken(t, admin, brokerNS, scanAudience),
		"another audience":               "Bearer " + serviceAccountToken(t, admin, brokerNS, "some-other-service"),
		"another namespace":              "Bearer " + serviceAccountToken(t, admin, otherNS, webhookAudience),
		"the broker's token, no scheme":  strings.TrimPrefix(broker, "Bearer "),
		"the broker's token, Basic auth": "Basic " + strings.TrimPrefix(broker, "Bearer "),
	} {
		if code := answer(t, repositoryEvent(t, url, events.TypeAPIServerAdd, "add-"+name, repo, auth)); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, code)
		}
	}
	unscanned("events without the broker's token")

	// The token is checked before the body is read: an unproven sender's 200 MiB is answered
	// 401, a proven sender's is cut at the events' bound.
	huge := func(auth string) *http.Request {
		req := repositoryEvent(t, url, events.TypeAPIServerAdd, "huge", repo, auth)
		req.Body = io.NopCloser(io.LimitReader(zeros{}, 200<<20))
		req.ContentLength = -1
		return req
	}
	if code := answer(t, huge("")); code != http.StatusUnauthorized {
		t.Errorf("200 MiB without a token: %d, want 401", code)
	}
	if code := answer(t, huge(broker)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("200 MiB with the broker's token: %d, want 413", code)
	}
	// Scan requests and registry pushes stay on the cluster-local surface, whoever sends them.
	scanRequest := repositoryEvent(t, url, events.TypeScanRequested, "scan-1", repo, broker)
	scanRequest.Body = io.NopCloser(strings.NewReader(fmt.Sprintf(`{"namespace":%q,"name":"app"}`, f.ns)))
	scanRequest.ContentLength = -1
	if code := answer(t, scanRequest); code != http.StatusBadRequest {
		t.Errorf("a scan request with the broker's token: %d, want 400", code)
	}
	cdevent := repositoryEvent(t, url, "dev.cdevents.artifact.published.0.2.0", "cd-1", repo, broker)
	cdevent.Body = io.NopCloser(strings.NewReader(`{"context":{"id":"x"},"subject":{"id":"pkg:oci/app?repository_url=` + reg.Image("broker/app") + `&tag=1.0.0"}}`))
	cdevent.ContentLength = -1
	if code := answer(t, cdevent); code != http.StatusBadRequest {
		t.Errorf("a registry push CloudEvent with the broker's token: %d, want 400", code)
	}
	unscanned("events the public surface does not serve")

	// The Broker's deliveries: the add of an unscanned repository scans it before the answer.
	if code := answer(t, repositoryEvent(t, url, events.TypeAPIServerAdd, "add-1", repo, broker)); code != http.StatusAccepted {
		t.Fatalf("the add with the broker's token: %d, want 202", code)
	}
	f.waitTag(t, "app", "1.0.0", time.Second)

	// `flux reconcile`'s annotation.
	reg.Push(t, "broker/app", "1.1.0")
	requested := time.Now().Format(time.RFC3339Nano)
	repo, err = f.kube.Repositories.RequestReconcile(ctx, f.ns, "app", requested)
	if err != nil {
		t.Fatal(err)
	}
	if code := answer(t, repositoryEvent(t, url, events.TypeAPIServerUpdate, "update-1", repo, broker)); code != http.StatusAccepted {
		t.Fatalf("the annotation's update: %d, want 202", code)
	}
	f.waitTag(t, "app", "1.1.0", time.Second)
	if got, _ := f.kube.Repositories.Get(ctx, f.ns, "app"); got.Status.LastHandledReconcileAt != requested {
		t.Errorf("lastHandledReconcileAt %q, want %q", got.Status.LastHandledReconcileAt, requested)
	}

	// A spec edit.
	reg.Push(t, "broker/app", "1.2.0")
	repo, err = f.kube.Repositories.Get(ctx, f.ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	repo.Spec.Interval = metav1.Duration{Duration: 2 * time.Hour}
	if repo, err = f.kube.Repositories.Update(ctx, repo); err != nil {
		t.Fatal(err)
	}
	if code := answer(t, repositoryEvent(t, url, events.TypeAPIServerUpdate, "update-2", repo, broker)); code != http.StatusAccepted {
		t.Fatalf("the spec edit's update: %d, want 202", code)
	}
	f.waitTag(t, "app", "1.2.0", time.Second)

	// The update that the scan's own status write causes finds nothing due: no scan.
	repo, err = f.kube.Repositories.Get(ctx, f.ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	scanned := repo.Status.LastScanResult.ScanTime
	reg.Push(t, "broker/app", "1.3.0")
	if code := answer(t, repositoryEvent(t, url, events.TypeAPIServerUpdate, "update-3", repo, broker)); code != http.StatusAccepted {
		t.Fatalf("the status write's update: %d, want 202", code)
	}
	if got, _ := f.kube.Repositories.Get(ctx, f.ns, "app"); !got.Status.LastScanResult.ScanTime.Equal(&scanned) {
		t.Errorf("the status write's own update was scanned again: %+v", got.Status.LastScanResult)
	}
}

// zeros reads as an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
