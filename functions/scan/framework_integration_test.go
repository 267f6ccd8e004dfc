package scan_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/testenv"
)

// serveTarget serves the function registered as target the way a functions-framework host does
// (FUNCTION_TARGET, funcframework.StartHostPort) and returns its base URL once it answers.
func serveTarget(t *testing.T, target string) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The host reads FUNCTION_TARGET when it starts: wait for it before the next target.
	t.Setenv("FUNCTION_TARGET", target)
	go func() { _ = funcframework.StartHostPort("127.0.0.1", strconv.Itoa(port)) }()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	testenv.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return url
}

// TestFunctionsFrameworkIntegration: the registrations a functions-framework host serves are the
// surfaces the images serve. "webhook" takes a registry webhook and nothing else; "scan" takes
// the broker's CloudEvents. Both build their dependencies from the environment on first use.
func TestFunctionsFrameworkIntegration(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	if _, err := c.Core.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: receiver.SecretName},
		Data:       map[string][]byte{receiver.SecretKey: []byte(token)},
	}, metav1.CreateOptions{}); err != nil {
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
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	t.Setenv("REFLECTOR_STORE_DIR", t.TempDir())
	t.Setenv("K_SINK", "")

	webhook := serveTarget(t, "webhook")
	scan := serveTarget(t, "scan")

	cloudEvent := func(url string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(fmt.Sprintf(`{"namespace":%q,"name":"app"}`, ns)))
		for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Type": events.TypeScanRequested, "Ce-Source": events.SourceCron, "Ce-Id": "ff-1", "Content-Type": "application/json"} {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := cloudEvent(webhook); code != http.StatusNotFound {
		t.Errorf("a CloudEvent to the webhook target: %d, want 404", code)
	}
	if code := cloudEvent(scan); code != http.StatusAccepted {
		t.Fatalf("a CloudEvent to the scan target: %d, want 202", code)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		r, err := c.Repositories.Get(ctx, ns, "app")
		if err != nil {
			return err
		}
		if r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != 1 {
			return fmt.Errorf("not scanned: %+v", r.Status)
		}
		return nil
	})

	body := fmt.Sprintf(`{"image":%q,"tag":"1.0.0"}`, reg.Image("ff/app"))
	req, _ := http.NewRequest(http.MethodPost, webhook+"/hook/generic/"+ns, strings.NewReader(body))
	req.Header.Set("X-Signature", "sha256="+hmacHex(token, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("a signed webhook to the webhook target: %s, want 202", resp.Status)
	}
}

// hmacHex is the hex HMAC-SHA256 of body under key, as the generic provider signs.
func hmacHex(key, body string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(body))
	return hex.EncodeToString(mac.Sum(nil))
}
