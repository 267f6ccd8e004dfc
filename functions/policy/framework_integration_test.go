package policy_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/store"
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

// TestFunctionsFrameworkIntegration: the "policy" registration, served by a functions-framework
// host process (FUNCTION_TARGET, funcframework.StartHostPort), is the handler cmd/policy serves,
// built from the environment on first use, and logs as cmd/policy does: JSON lines with URL
// userinfo masked and the request's trace id. On SIGTERM the host shuts the function down and
// exits by itself with status 0.
func TestFunctionsFrameworkIntegration(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	repo, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec:       v1.ImageRepositorySpec{Image: "ghcr.io/org/app", Interval: metav1.Duration{Duration: time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := reconcile.RepositoryIdentity(repo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Name: "app"},
			Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "*"}}},
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writer := store.New(dir, store.WithLinger(0))
	if _, _, err := writer.Put(ctx, reconcile.StoreKey(ns, "app"), id, []string{"1.0.0", "1.1.0"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := writer.Close(); err != nil {
		t.Fatal(err)
	}

	// funcframework binds its port itself, from a number.
	host := testenv.StartOnPort(t, 30*time.Second, func(port int) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFunctionsFrameworkHost$")
		cmd.Env = append(os.Environ(), "FUNCTION_TARGET=policy", hostPortEnv+"="+strconv.Itoa(port),
			"KUBECONFIG="+env.Kubeconfig, "REFLECTOR_STORE_DIR="+dir, "K_SINK=")
		return cmd
	}, func(port int) error {
		resp, err := testenv.ProbeClient().Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	url := "http://127.0.0.1:" + strconv.Itoa(host.Port)

	// The cron reconciler's request, evaluated before the answer; /evaluate is off by default.
	req, _ := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(`{"namespace":"`+ns+`","name":"app"}`))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Type": events.TypePolicyRequested,
		"Ce-Source": events.SourceCron, "Ce-Id": "ff-1", "Content-Type": "application/json"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("a policy request: %s %s", resp.Status, b)
	}
	resp, err = http.Post(url+"/evaluate?namespace="+ns+"&name=app", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /evaluate without REFLECTOR_DEBUG_ENDPOINTS: %s, want 404", resp.Status)
	}
	p, err := c.Policies.Get(ctx, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "1.1.0" {
		t.Errorf("latestRef %+v", p.Status.LatestRef)
	}

	// The host logs an ignored CloudEvent's source; this one's carries a password.
	tc := trace.New()
	req, _ = http.NewRequest(http.MethodPost, url+"/", strings.NewReader("{}"))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "com.example.unknown", "Ce-Source": testenv.PlantedSource,
		"Ce-Id": "ff-2", "Content-Type": "application/json", trace.Header: tc.String()} {
		req.Header.Set(k, v)
	}
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("a CloudEvent of an unknown type: %s, want 202", resp.Status)
	}

	if err := host.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-host.Exited():
		if err := host.Wait(); err != nil {
			t.Errorf("after SIGTERM: %v, want exit status 0; output:\n%s", err, host.Output)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM; output:\n%s", host.Output)
	}
	testenv.CheckLogged(t, host.Output.String(), "event ignored", "ff-2", tc.TraceIDString())
}
