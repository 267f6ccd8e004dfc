package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine, so
// that a test can check that a helper fails.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestCosignCLIGuard checks the guard that keeps cosign to 127.0.0.1: `cosign sign` with its
// defaults (a signing config and trusted root from the public TUF repository, a Rekor upload)
// asks for a host beyond it, the guard answers in its place, and the run fails naming the
// host. Nothing leaves the machine: the request reaches only the guard.
func TestCosignCLIGuard(t *testing.T) {
	cli := NewCosignCLI(t)
	key := cli.GenerateKeyPair(t)
	reg := NewRegistry(t, RegistryReferrers())
	digest := reg.Push(t, "app", "1.0.0")
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		cli.run(rec, key, "sign", "--key", "cosign.key", "--yes", "--allow-http-registry", reg.Image("app")+"@"+digest)
	}()
	<-done
	t.Logf("cosign sign with its defaults: %v, %q", time.Since(start).Round(time.Millisecond), rec.msg)
	if !strings.Contains(rec.msg, "cosign sign tried to reach ") {
		t.Fatalf("cosign sign with its defaults did not fail for reaching beyond 127.0.0.1: %q", rec.msg)
	}
	if strings.Contains(rec.msg, key.password) {
		t.Error("the failure quotes the key's password")
	}
}
