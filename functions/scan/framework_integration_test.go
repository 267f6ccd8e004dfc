package scan_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	"github.com/dgraph-io/badger/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/trace"
)

// hostPortEnv tells the test binary to be a functions-framework host on this port.
const hostPortEnv = "REFLECTOR_TEST_FUNCFRAMEWORK_PORT"

// TestFunctionsFrameworkHost is the process that TestFunctionsFrameworkIntegration starts: a
// functions-framework host serving $FUNCTION_TARGET, as funcframework.Start does.
func TestFunctionsFrameworkHost(t *testing.T) {
	port := os.Getenv(hostPortEnv)
	if port == "" {
		t.Skip("the functions-framework host process of TestFunctionsFrameworkIntegration")
	}
	t.Fatal(funcframework.StartHostPort("127.0.0.1", port))
}

// host is a functions-framework host process serving one target.
type host struct {
	target string
	url    string
	proc   *testenv.Process
}

// startHost starts a process that serves the function registered as target the way a
// functions-framework host does (FUNCTION_TARGET, funcframework.StartHostPort) with env added
// to its environment, and returns it once it answers. funcframework binds its port itself, from
// a number, so the port is one that testenv.StartOnPort picks.
func startHost(t *testing.T, target string, env ...string) *host {
	t.Helper()
	proc := testenv.StartOnPort(t, 30*time.Second, func(port int) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFunctionsFrameworkHost$")
		cmd.Env = append(os.Environ(), append(env, "FUNCTION_TARGET="+target, hostPortEnv+"="+strconv.Itoa(port))...)
		return cmd
	}, func(port int) error {
		resp, err := testenv.ProbeClient().Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return &host{target: target, url: "http://127.0.0.1:" + strconv.Itoa(proc.Port), proc: proc}
}

// stop sends the host SIGTERM and waits for it to exit by itself, with status 0.
func (h *host) stop(t *testing.T) {
	t.Helper()
	if err := h.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.proc.Exited():
		if err := h.proc.Wait(); err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0; output:\n%s", h.target, err, h.proc.Output)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running 30s after SIGTERM; output:\n%s", h.target, h.proc.Output)
	}
}

// TestFunctionsFrameworkIntegration: the registrations a functions-framework host serves are the
// surfaces the images serve, built from the environment on first use. "webhook" takes a registry
// webhook and nothing else, and the push it reports gets scanned; "scan" takes the broker's
// CloudEvents. The hosts log as cmd/scan does: JSON lines with URL userinfo masked and the
// request's trace id. On SIGTERM each host drains and closes the tag store and exits by itself,
// so a read-only open of the store needs no log replay.
func TestFunctionsFrameworkIntegration(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	if _, err := c.Secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: receiver.SecretName},
		Data:       map[string][]byte{receiver.SecretKey: []byte(token)},
	}); err != nil {
		t.Fatal(err)
	}
	reg := testenv.NewRegistry(t)
	reg.Push(t, "ff/app", "1.0.0")
	if _, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec:       v1.ImageRepositorySpec{Image: reg.Image("ff/app"), Insecure: true, Interval: metav1.Duration{Duration: time.Hour}},
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hostEnv := []string{"KUBECONFIG=" + env.Kubeconfig, "REFLECTOR_STORE_DIR=" + dir, "K_SINK="}
	webhook := startHost(t, "webhook", hostEnv...)
	scan := startHost(t, "scan", hostEnv...)

	cloudEvent := func(url string, header ...string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(fmt.Sprintf(`{"namespace":%q,"name":"app"}`, ns)))
		for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Type": events.TypeScanRequested, "Ce-Source": events.SourceCron, "Ce-Id": "ff-1", "Content-Type": "application/json"} {
			req.Header.Set(k, v)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	scanned := func(tag string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			r, err := c.Repositories.Get(ctx, ns, "app")
			if err != nil {
				return err
			}
			if r.Status.LastScanResult == nil || !slices.Contains(r.Status.LastScanResult.LatestTags, tag) {
				return fmt.Errorf("%s not scanned: %+v", tag, r.Status)
			}
			return nil
		})
	}
	if code := cloudEvent(webhook.url); code != http.StatusNotFound {
		t.Errorf("a CloudEvent to the webhook target: %d, want 404", code)
	}
	if code := cloudEvent(scan.url); code != http.StatusAccepted {
		t.Fatalf("a CloudEvent to the scan target: %d, want 202", code)
	}
	scanned("1.0.0")
	// The scan target logs each CloudEvent's source; this one's carries a password.
	tc := trace.New()
	if code := cloudEvent(scan.url, "Ce-Type", "com.example.unknown", "Ce-Source", testenv.PlantedSource, "Ce-Id", "ff-2", trace.Header, tc.String()); code != http.StatusAccepted {
		t.Errorf("a CloudEvent of an unknown type to the scan target: %d, want 202", code)
	}

	reg.Push(t, "ff/app", "1.1.0")
	body := fmt.Sprintf(`{"image":%q,"tag":"1.1.0"}`, reg.Image("ff/app"))
	req, _ := http.NewRequest(http.MethodPost, webhook.url+"/hook/generic/"+ns, strings.NewReader(body))
	req.Header.Set("X-Signature", "sha256="+hmacHex(token, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a signed webhook to the webhook target: %s, want 202", resp.Status)
	}
	scanned("1.1.0")

	webhook.stop(t)
	scan.stop(t)
	for _, h := range []*host{webhook, scan} {
		if !strings.Contains(h.proc.Output.String(), "shutting down") {
			t.Errorf("%s did not say it shuts down:\n%s", h.target, h.proc.Output)
		}
	}
	testenv.CheckLogged(t, scan.proc.Output.String(), "cloudevent", "ff-2", tc.TraceIDString())
	db, err := badger.Open(badger.DefaultOptions(dir).WithReadOnly(true).WithLogger(nil))
	if err != nil {
		t.Fatalf("read-only open after SIGTERM: %v", err)
	}
	db.Close()
}

// hmacHex is the hex HMAC-SHA256 of body under key, as the generic provider signs.
func hmacHex(key, body string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(body))
	return hex.EncodeToString(mac.Sum(nil))
}
