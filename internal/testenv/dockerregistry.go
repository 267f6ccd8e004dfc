package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// NewDockerRegistry starts Debian's docker-registry (CNCF distribution 2.8, which has no
// referrers API) for the test on 127.0.0.1, storing under a temporary directory, and returns its
// host:port; it stops it when the test ends. It skips the test where docker-registry is not
// installed. Deletion is enabled, as the referrers tag schema needs: a client that adds a
// referrer replaces the index and deletes the old one.
func NewDockerRegistry(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("docker-registry"); err != nil {
		t.Fatalf("docker-registry: %v (make deps installs it)", err)
	}
	dir := t.TempDir()
	var host string
	err := RetryPorts(func() error {
		port, err := PortForProcess()
		if err != nil {
			return err
		}
		host = "127.0.0.1:" + strconv.Itoa(port)
		cfg := filepath.Join(dir, "config.yml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "data"), host), 0o600); err != nil {
			return err
		}
		out := &LogBuffer{}
		cmd := exec.Command("docker-registry", "serve", cfg)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return err
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			select {
			case <-exited:
				if AddrInUse([]byte(out.String())) {
					return ErrAddrInUse
				}
				return fmt.Errorf("docker-registry exited: %s", out.String())
			case <-ctx.Done():
				stop()
				return fmt.Errorf("docker-registry did not answer on %s: %s", host, out.String())
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := http.Get("http://" + host + "/v2/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Cleanup(stop)
					return nil
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return host
}
