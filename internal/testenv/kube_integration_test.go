package testenv

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartRetriesTakenPortsIntegration hands etcd and then kube-apiserver, as the first port of
// each, one that another listener holds, and checks that Start notices each exit and starts the
// program again on another port.
func TestStartRetriesTakenPortsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts etcd and kube-apiserver; run it without -short")
	}
	taken, err := ListenLow()
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	// Start asks for etcd's client and peer ports, twice since the first client port is
	// taken, then for kube-apiserver's.
	calls := 0
	pickPort = func() (int, error) {
		if calls++; calls == 1 || calls == 5 {
			return takenPort, nil
		}
		return PortForProcess()
	}
	t.Cleanup(func() { pickPort = PortForProcess })

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
	if _, err := env.Clientset().Discovery().ServerVersion(); err != nil {
		t.Errorf("the apiserver started on another port does not answer: %v", err)
	}
	if calls != 6 {
		t.Errorf("%d ports picked, want 6", calls)
	}
}
