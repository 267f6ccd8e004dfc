package stack_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/imagereflector/reflector/internal/stack"
)

// start runs the whole system for tb in a temporary directory (unless opts names one) and stops
// it when tb ends. It skips tb where Debian's docker-registry is not installed.
func start(tb testing.TB, opts stack.Options) *stack.Stack {
	tb.Helper()
	if testing.Short() {
		tb.Skip("integration test: starts the whole system as processes; run it without -short")
	}
	if _, err := exec.LookPath("docker-registry"); err != nil {
		tb.Skip("docker-registry is not installed: run `make deps`")
	}
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	s, err := stack.Start(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Stop() })
	return s
}
