package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/preflight"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// noProbe fails the test if the command sends a request to the webhook route: the tests'
// cluster has none.
func noProbe(t *testing.T) prober {
	return func(string) (preflight.Prober, error) {
		return func(_ context.Context, url string) error {
			t.Errorf("probed %s", url)
			return nil
		}, nil
	}
}

// TestCheckIntegration runs `reflector check` against a real apiserver that has reflector's
// CRDs and nothing else: it prints a line per check, the fixes under the failures, and exits 1.
func TestCheckIntegration(t *testing.T) {
	env := testenv.Kube(t)
	for _, tc := range []struct {
		name  string
		args  []string
		lines []string
	}{
		{"pre", []string{"check", "--pre", "--kubeconfig", env.Kubeconfig}, []string{
			"✔ ImagePolicy schema: reflector's: spec.verify is served",
			"✗ StorageClass: no StorageClass",
			"✗ Knative Serving: not installed",
			"    kubectl patch configmap config-features -n knative-eventing",
		}},
		{"installed", []string{"check", "--kubeconfig", env.Kubeconfig}, []string{
			"✗ Webhook route: reflector-system/reflector-webhook does not exist",
			"✗ Broker: ",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr, noProbe(t), false); code != 1 {
				t.Errorf("exit code %d, want 1; stderr: %s", code, stderr.String())
			}
			out := stdout.String()
			for _, l := range tc.lines {
				if !strings.Contains(out, "\n"+l) && !strings.HasPrefix(out, l) {
					t.Errorf("output lacks the line %q:\n%s", l, out)
				}
			}
			if strings.Contains(out, "\x1b[") {
				t.Errorf("colours without a terminal:\n%s", out)
			}
		})
	}
	if !t.Failed() {
		var stdout, stderr bytes.Buffer
		run([]string{"check", "--pre", "--kubeconfig", env.Kubeconfig}, &stdout, &stderr, noProbe(t), true)
		if !strings.Contains(stdout.String(), "\x1b[31m✗\x1b[0m") || !strings.Contains(stdout.String(), "\x1b[32m✔\x1b[0m") {
			t.Errorf("no colours on a terminal:\n%s", stdout.String())
		}
	}
}

func TestUsage(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"chek"}, {"check", "extra"}, {"check", "--no-such-flag"}, {"check", "--kubeconfig", "/nonexistent/kubeconfig"},
		{"check", "--ca-file", "/nonexistent/ca.pem"}, {"check", "--ca-file", notPEM}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr, httpProber, false); code != 2 {
			t.Errorf("%q: exit code %d, want 2", args, code)
		}
		if stdout.Len() != 0 || stderr.Len() == 0 {
			t.Errorf("%q: stdout %q, stderr %q: want the complaint on stderr only", args, stdout.String(), stderr.String())
		}
	}
}
