package testenv

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestStartRetriesTakenPortsIntegration hands etcd and then kube-apiserver, as the first port of
// each, one that another listener holds, and checks that Start notices each exit and starts the
// program again on another port.
func TestStartRetriesTakenPortsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts etcd and kube-apiserver; run it without -short")
	}
	// Start asks for etcd's client and peer ports, twice since the first client port is
	// taken, then for kube-apiserver's.
	takenPort, picks := pickTakenAt(t, 1, 5)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	if strings.HasSuffix(env.APIServerURL, ":"+strconv.Itoa(takenPort)) {
		t.Errorf("kube-apiserver at %s, the taken port", env.APIServerURL)
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		b, err := os.ReadFile(filepath.Join(env.Dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if !AddrInUse(b) {
			t.Errorf("%s never said its port was taken: was it started on it?\n%s", name, b)
		}
	}
	if _, err := env.serverVersion(context.Background()); err != nil {
		t.Errorf("the apiserver started on another port does not answer: %v", err)
	}
	if *picks != 6 {
		t.Errorf("%d ports picked, want 6", *picks)
	}
}

// TestStartKnativeRetriesATakenWebhookPortIntegration hands Serving's webhook a port that
// another listener holds, and checks that StartKnative starts it again on another port, which
// its webhook configurations then name.
func TestStartKnativeRetriesATakenWebhookPortIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts kube-apiserver and Knative Serving; run it without -short")
	}
	if _, _, err := KnativeBinDir("serving"); err != nil {
		t.Skipf("Knative serving is not built: %v", err)
	}
	// Start picks three ports (etcd's two, kube-apiserver's); the fourth is the webhook's.
	takenPort, _ := pickTakenAt(t, 4)
	env, _ := KnativeEnv(t, KnativeOptions{Serving: true})
	b, err := os.ReadFile(filepath.Join(env.Dir, "knative-serving-webhook.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !AddrInUse(b) {
		t.Errorf("the webhook never said its port was taken: was it started on it?")
	}
	svc, err := env.Dynamic().Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).
		Namespace("knative-serving").Get(context.Background(), "webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if p, _, _ := unstructured.NestedInt64(ports[0].(map[string]any), "port"); int(p) == takenPort {
		t.Errorf("the webhook Service still names the taken port %d", p)
	}
}

// pickTakenAt makes the port picks numbered at (from 1) hand out a port that a listener of the
// test holds, until the test ends, and returns that port and the count of picks so far.
func pickTakenAt(t *testing.T, at ...int) (int, *int) {
	t.Helper()
	taken, err := ListenLow()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	port := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	pickPort = func() (int, error) {
		if picks++; slices.Contains(at, picks) {
			return port, nil
		}
		return PortForProcess()
	}
	t.Cleanup(func() { pickPort = PortForProcess })
	return port, &picks
}
