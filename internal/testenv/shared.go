package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/egress"
)

// LoopbackAllowed is the egress allow-list of tests and of `make run`: 127.0.0.1 alone.
const LoopbackAllowed = "127.0.0.1/32"

var (
	sharedOnce sync.Once
	shared     *Env
	sharedErr  error
	nsCounter  atomic.Int64
)

// Main runs a package's tests, with LoopbackAllowed as the egress allow-list unless the
// environment sets one, and then stops the environment they shared. Use it as
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	// Tests reach their servers on 127.0.0.1, as `make run` allows its registries there; every
	// other loopback address stands for a cluster's private network, which the egress guard
	// refuses.
	if _, set := os.LookupEnv(egress.EnvAllow); !set {
		os.Setenv(egress.EnvAllow, LoopbackAllowed)
	}
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stopping:", err)
		}
	}
	os.Exit(code)
}

// Kube returns the kube-apiserver shared by every test of the binary, starting it on first use.
// The binary's TestMain must be Main, which stops it. A missing binary fails the test with the
// command that builds it. Under -short (make unit) the test is skipped: it is an integration
// test.
func Kube(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts etcd and kube-apiserver; run it without -short")
	}
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx, Options{})
	})
	if sharedErr != nil {
		t.Fatalf("starting kube-apiserver: %v", sharedErr)
	}
	return shared
}

// Namespace creates a namespace of its own for a test, with the given labels, and returns its
// name. Namespaces are not deleted: nothing in the environment would finalize them.
func (e *Env) Namespace(t testing.TB, labels ...map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", sanitize(t.Name()), nsCounter.Add(1))
	var l map[string]string
	if len(labels) > 0 {
		l = labels[0]
	}
	if err := e.ensureNamespace(context.Background(), name, l); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// sanitize turns a test name into a DNS label prefix.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}
