package stack_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// fluxCLI runs the real flux CLI (`make flux-cli` builds it into the test environment's cache)
// against a stack's apiserver.
type fluxCLI struct {
	bin, kubeconfig, namespace string
}

func newFluxCLI(tb testing.TB, s *stack.Stack, namespace string) *fluxCLI {
	tb.Helper()
	bin := filepath.Join(testenv.BinDir(), "flux")
	if _, err := os.Stat(bin); err != nil {
		tb.Fatalf("the flux CLI is not built (run make flux-cli): %v", err)
	}
	return &fluxCLI{bin: bin, kubeconfig: s.Env.Kubeconfig, namespace: namespace}
}

// run runs flux with args and returns what it printed (its log goes to stderr, tables and
// YAML to stdout) and its error.
func (f *fluxCLI) run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	args = append(args, "--kubeconfig="+f.kubeconfig, "--namespace="+f.namespace, "--timeout=1m")
	cmd := exec.CommandContext(ctx, f.bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// The CLI keeps its caches (discovery) under HOME; give it one of its own.
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(f.kubeconfig))
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// must runs flux and fails the test unless it succeeds and printed every one of want.
func (f *fluxCLI) must(t *testing.T, ctx context.Context, want []string, args ...string) string {
	t.Helper()
	stdout, stderr, err := f.run(ctx, args...)
	if err != nil {
		t.Fatalf("flux %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	both := stdout + stderr
	for _, w := range want {
		if !strings.Contains(both, w) {
			t.Fatalf("flux %s printed no %q:\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), w, stdout, stderr)
		}
	}
	return stdout
}

// TestFluxCLIIntegration drives reflector with the flux CLI as a Flux user does, and checks
// that each command answers as it does with Flux's image-reflector-controller: create waits for
// Ready, reconcile and resume wait for status.lastHandledReconcileAt, get and export read the
// objects.
func TestFluxCLIIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{})
	const ns = "flux-cli"
	if _, err := s.Env.Apply(ctx, "", []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n")); err != nil {
		t.Fatal(err)
	}
	flux := newFluxCLI(t, s, ns)
	image := s.Registry + "/flux/app"
	for _, tag := range []string{"1.0.0", "1.1.0", "2.0.0-rc.1"} {
		if _, err := stack.Push(image + ":" + tag); err != nil {
			t.Fatal(err)
		}
	}

	flux.must(t, ctx, []string{"ImageRepository created", "ImageRepository reconciliation completed"},
		"create", "image", "repository", "app", "--image="+image, "--interval=10m")
	flux.must(t, ctx, []string{"ImagePolicy created", "ImagePolicy reconciliation completed"},
		"create", "image", "policy", "app", "--image-ref=app", "--select-semver=>=1.0.0")

	out := flux.must(t, ctx, nil, "get", "images", "all")
	for _, w := range []string{"imagerepository/app", "imagepolicy/app", "successful scan: found 3 tags",
		"Latest image tag for '" + image + "' resolved to 1.1.0"} {
		if !strings.Contains(out, w) {
			t.Errorf("flux get images all shows no %q:\n%s", w, out)
		}
	}

	// A tag pushed with the registry's notification lost: only a reconcile finds it.
	if _, err := stack.Push(image + ":1.2.0"); err != nil {
		t.Fatal(err)
	}
	flux.must(t, ctx, []string{"ImageRepository annotated", "scan fetched 4 tags"},
		"reconcile", "image", "repository", "app")
	flux.must(t, ctx, []string{"ImagePolicy annotated", "selected ref " + image + ":1.2.0"},
		"reconcile", "image", "policy", "app")

	flux.must(t, ctx, []string{"suspending image repository app", "image repository suspended"},
		"suspend", "image", "repository", "app")
	repo, err := s.Kube.Repositories.Get(ctx, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if !repo.Spec.Suspend {
		t.Fatal("flux suspend did not suspend the ImageRepository")
	}
	if _, stderr, err := flux.run(ctx, "reconcile", "image", "repository", "app"); err == nil || !strings.Contains(stderr, "resource is suspended") {
		t.Errorf("flux reconcile of a suspended ImageRepository: %v, want 'resource is suspended':\n%s", err, stderr)
	}
	out = flux.must(t, ctx, nil, "get", "image", "repository", "app")
	if !strings.Contains(out, "True") {
		t.Errorf("flux get image repository shows no SUSPENDED True:\n%s", out)
	}
	flux.must(t, ctx, []string{"resuming image repository app", "image repository resumed", "ImageRepository app reconciliation completed", "scan fetched 4 tags"},
		"resume", "image", "repository", "app")

	// export prints what a user commits to Git: the spec, and no status or server-set fields.
	exported := flux.must(t, ctx, nil, "export", "image", "repository", "app")
	var er v1.ImageRepository
	if err := yaml.UnmarshalStrict([]byte(exported), &er); err != nil {
		t.Fatalf("flux export image repository: %v\n%s", err, exported)
	}
	if er.Kind != "ImageRepository" || er.APIVersion != v1.GroupVersion.String() || er.Name != "app" || er.Namespace != ns ||
		er.Spec.Image != image || er.Spec.Interval.Duration != 10*time.Minute || er.Spec.Suspend || er.ResourceVersion != "" ||
		er.Status.LastScanResult != nil {
		t.Errorf("flux export image repository:\n%s", exported)
	}
	exported = flux.must(t, ctx, nil, "export", "image", "policy", "app")
	var ep v1.ImagePolicy
	if err := yaml.UnmarshalStrict([]byte(exported), &ep); err != nil {
		t.Fatalf("flux export image policy: %v\n%s", err, exported)
	}
	if ep.Name != "app" || ep.Spec.ImageRepositoryRef.Name != "app" || ep.Spec.Policy.SemVer == nil ||
		ep.Spec.Policy.SemVer.Range != ">=1.0.0" || ep.Status.LatestRef != nil {
		t.Errorf("flux export image policy:\n%s", exported)
	}
}
