package scan_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/functions/scan"
	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/tokenreview"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const token = "e2e-t0ken"

// function serves the scan function's two surfaces over real HTTP against the shared
// apiserver, in a namespace of its own whose receiver has token.
type function struct {
	kube   *kube.Client
	ns     string
	hooks  *httptest.Server
	events *httptest.Server
}

func newFunction(t *testing.T) *function {
	t.Helper()
	return serveFunction(t, nil)
}

// serveFunction is newFunction with the Verifier that senders returns for the function's client
// as Deps.Senders (nil: none).
func serveFunction(t *testing.T, senders func(*kube.Client) *tokenreview.Verifier) *function {
	t.Helper()
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: receiver.SecretName},
		Data:       map[string][]byte{receiver.SecretKey: []byte(token)},
	}
	if _, err := c.Secrets.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	d := &scan.Deps{
		Kube:     c,
		Registry: registry.New(registry.WithRateLimit(0, 0)),
		Store:    store.New(t.TempDir()),
		Log:      slog.New(slog.NewJSONHandler(io.Discard, nil)),
	}
	if senders != nil {
		d.Senders = senders(c)
	}
	h := scan.NewHandler(d)
	hooks := httptest.NewServer(h.Webhooks())
	evs := httptest.NewServer(h.CloudEvents())
	t.Cleanup(func() {
		hooks.Close()
		evs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &function{kube: c, ns: ns, hooks: hooks, events: evs}
}

func (f *function) createRepo(t *testing.T, name, image string) {
	t.Helper()
	r := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec:       v1.ImageRepositorySpec{Image: image, Interval: metav1.Duration{Duration: time.Hour}, Insecure: true},
	}
	if _, err := f.kube.Repositories.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// waitTag waits until the status of name lists tag.
func (f *function) waitTag(t *testing.T, name, tag string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, func() error {
		r, err := f.kube.Repositories.Get(context.Background(), f.ns, name)
		if err != nil {
			return err
		}
		if r.Status.LastScanResult == nil || !slices.Contains(r.Status.LastScanResult.LatestTags, tag) {
			return fmt.Errorf("tag %s not in the status of %s: %+v", tag, name, r.Status)
		}
		return nil
	})
}

// TestScanFunctionIntegrationRoutes: each surface serves /healthz; webhooks under /hook/ reach
// the public surface only, and CloudEvents the cluster-local one only.
func TestScanFunctionIntegrationRoutes(t *testing.T) {
	f := newFunction(t)
	reg := testenv.NewRegistry(t)
	reg.Push(t, "routes/app", "1.0.0")
	f.createRepo(t, "app", reg.Image("routes/app"))

	for _, url := range []string{f.hooks.URL, f.events.URL} {
		if code := status(t, http.MethodGet, url+"/healthz", nil); code != http.StatusOK {
			t.Fatalf("GET %s/healthz: %d", url, code)
		}
	}
	if code := status(t, http.MethodGet, f.hooks.URL+"/hook/generic/"+f.ns, nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /hook on the webhook surface: %d", code)
	}
	if code := status(t, http.MethodPost, f.events.URL+"/hook/generic/"+f.ns, nil); code != http.StatusBadRequest {
		t.Fatalf("POST /hook on the CloudEvents surface: %d, want 400 (not a CloudEvent)", code)
	}

	scanRequest := func() *http.Request {
		req, _ := http.NewRequest(http.MethodPost, "/",
			strings.NewReader(fmt.Sprintf(`{"namespace":%q,"name":"app"}`, f.ns)))
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Type", events.TypeScanRequested)
		req.Header.Set("Ce-Source", events.SourceCron)
		req.Header.Set("Ce-Id", "1")
		req.Header.Set("Content-Type", "application/json")
		return req
	}
	if code := status(t, http.MethodPost, f.hooks.URL+"/", scanRequest()); code != http.StatusNotFound {
		t.Fatalf("a scan request on the webhook surface: %d, want 404", code)
	}
	r, err := f.kube.Repositories.Get(context.Background(), f.ns, "app")
	if err != nil || r.Status.LastScanResult != nil {
		t.Fatalf("the webhook surface scanned: %+v %v", r.Status, err)
	}
	if code := status(t, http.MethodPost, f.events.URL+"/", scanRequest()); code != http.StatusAccepted {
		t.Fatalf("a scan request on the CloudEvents surface: %d", code)
	}
	f.waitTag(t, "app", "1.0.0", time.Second)
}

// TestScanFunctionIntegrationDistributionEndToEnd runs Debian's docker-registry (CNCF
// distribution 2.8) configured to send its real notifications to the scan function, pushes a
// tag with go-containerregistry, and waits for the tag in the ImageRepository's status.
func TestScanFunctionIntegrationDistributionEndToEnd(t *testing.T) {
	const bin = "/usr/bin/docker-registry"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is absent: install Debian's docker-registry package (hack/deps.sh does)", bin)
	}
	f := newFunction(t)
	dir := t.TempDir()
	// docker-registry binds its address itself, from its configuration.
	reg := testenv.StartOnPort(t, 15*time.Second, func(port int) *exec.Cmd {
		config := stack.RegistryConfig(filepath.Join(dir, "data"), fmt.Sprintf("127.0.0.1:%d", port),
			fmt.Sprintf("%s/hook/distribution/%s", f.hooks.URL, f.ns), token, 100*time.Millisecond)
		cfgPath := filepath.Join(dir, "config.yml")
		if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "serve", cfgPath)
	}, func(port int) error {
		return stack.RegistryAnswers(fmt.Sprintf("http://127.0.0.1:%d/v2/", port), filepath.Join(dir, "data"))
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("docker-registry log:\n%s", reg.Output)
		}
	})
	host := fmt.Sprintf("127.0.0.1:%d", reg.Port)

	f.createRepo(t, "app", host+"/e2e/app")
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(host+"/e2e/app:1.0.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	f.waitTag(t, "app", "1.0.0", 30*time.Second)
}

// status sends req (a new one of method and url when nil; else req with url as its URL) and
// returns the answer's status code.
func status(t *testing.T, method, url string, req *http.Request) int {
	t.Helper()
	if req == nil {
		req, _ = http.NewRequest(method, url, nil)
	} else {
		u, err := req.URL.Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		req.URL, req.Host = u, u.Host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestScanFunctionIntegrationScanOutlivesItsRequest: a scan request whose sender stops waiting
// (the cron reconciler's request times out) still runs to the repository's own timeout, and its
// failure is written.
func TestScanFunctionIntegrationScanOutlivesItsRequest(t *testing.T) {
	f := newFunction(t)
	// A registry that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "slow"},
		Spec: v1.ImageRepositorySpec{Image: ln.Addr().String() + "/app", Insecure: true,
			Interval: metav1.Duration{Duration: time.Hour}, Timeout: &metav1.Duration{Duration: 2 * time.Second}},
	}
	if _, err := f.kube.Repositories.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, f.events.URL+"/", strings.NewReader(fmt.Sprintf(`{"namespace":%q,"name":"slow"}`, f.ns)))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Type": events.TypeScanRequested, "Ce-Source": events.SourceCron, "Ce-Id": "slow-1", "Content-Type": "application/json"} {
		req.Header.Set(k, v)
	}
	impatient := &http.Client{Timeout: 200 * time.Millisecond}
	if resp, err := impatient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the scan request was answered (%d) before the registry's timeout", resp.StatusCode)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		got, err := f.kube.Repositories.Get(context.Background(), f.ns, "slow")
		if err != nil {
			return err
		}
		if !apimeta.IsStatusConditionFalse(got.Status.Conditions, v1.ReadyCondition) {
			return fmt.Errorf("no failure written after the sender gave up: %+v", got.Status)
		}
		return nil
	})
}
