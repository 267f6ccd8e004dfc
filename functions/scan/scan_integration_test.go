package scan_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
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
)

func TestMain(m *testing.M) { testenv.Main(m) }

const token = "e2e-t0ken"

// function serves the scan function over real HTTP against the shared apiserver, in a
// namespace of its own whose receiver has token.
type function struct {
	kube *kube.Client
	ns   string
	srv  *httptest.Server
}

func newFunction(t *testing.T) *function {
	t.Helper()
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: receiver.SecretName},
		Data:       map[string][]byte{receiver.SecretKey: []byte(token)},
	}
	if _, err := c.Core.CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := scan.NewHandler(&scan.Deps{
		Kube:     c,
		Registry: registry.New(registry.WithRateLimit(0, 0)),
		Store:    store.New(t.TempDir()),
		Log:      slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &function{kube: c, ns: ns, srv: srv}
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

// waitTag polls until the status of name lists tag.
func (f *function) waitTag(t *testing.T, name, tag string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := f.kube.Repositories.Get(context.Background(), f.ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.LastScanResult != nil && slices.Contains(r.Status.LastScanResult.LatestTags, tag) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tag %s not in the status of %s within %s: %+v", tag, name, within, r.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestScanFunctionIntegrationRoutes: /healthz, webhooks under /hook/ and CloudEvents at /
// reach their handlers.
func TestScanFunctionIntegrationRoutes(t *testing.T) {
	f := newFunction(t)
	reg := testenv.NewRegistry(t)
	reg.Push(t, "routes/app", "1.0.0")
	f.createRepo(t, "app", reg.Image("routes/app"))

	resp, err := http.Get(f.srv.URL + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(f.srv.URL + "/hook/generic/" + f.ns)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /hook: %v %v", resp, err)
	}
	resp.Body.Close()

	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/",
		strings.NewReader(fmt.Sprintf(`{"namespace":%q,"name":"app"}`, f.ns)))
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Type", events.TypeScanRequested)
	req.Header.Set("Ce-Source", events.SourceCron)
	req.Header.Set("Ce-Id", "1")
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("scan request: %v %v", resp, err)
	}
	resp.Body.Close()
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
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	dir := t.TempDir()
	config := stack.RegistryConfig(filepath.Join(dir, "data"), host,
		fmt.Sprintf("%s/hook/distribution/%s", f.srv.URL, f.ns), token, 100*time.Millisecond)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("docker-registry log:\n%s", logs.String())
		}
	})
	waitServing(t, "http://"+host+"/v2/")

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

func waitServing(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not serving within 15s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
