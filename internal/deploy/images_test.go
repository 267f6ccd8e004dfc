package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/imagereflector/reflector/internal/testenv"
)

// pushBase pushes a minimal base image, a stand-in for the distroless static base that .ko.yaml
// names and that cannot be pulled offline: no files, the host's platform, the nonroot user.
func pushBase(t *testing.T, host string) string {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		OS: "linux", Architecture: runtime.GOARCH,
		Config: v1.Config{User: "65532", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/base/static:nonroot"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("pushing the base image: %v", err)
	}
	return ref
}

// builtImages reads what `make images` wrote for kustomize: image name by ko:// reference.
func builtImages(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		tag, _ := o.Object["imageTag"].(map[string]any)
		ko, _ := tag["name"].(string)
		newName, _ := tag["newName"].(string)
		digest, _ := tag["digest"].(string)
		if o.GetKind() != "ImageTagTransformer" || ko == "" || newName == "" || digest == "" {
			t.Fatalf("%s: not an image mapping with a digest: %v", file, o.Object)
		}
		out[ko] = newName + "@" + digest
	}
	return out
}

// extract writes the file at file (absolute, in the image's filesystem) to dir.
func extract(t *testing.T, img v1.Image, file, dir string) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	want := strings.TrimPrefix(path.Clean(file), "/")
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("the image has no %s", file)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(path.Clean(h.Name), "/") != want {
			continue
		}
		if h.Typeflag == tar.TypeSymlink {
			// ko links /ko-app/<name> to where the binary lives.
			return extract(t, img, path.Join(path.Dir(file), h.Linkname), dir)
		}
		out := filepath.Join(dir, path.Base(file))
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// TestImagesIntegration runs `make images` against a registry on 127.0.0.1: ko builds the three
// images and pushes them, and writes the mapping that points knative/ at them. Each image is
// pulled back, its entry point extracted and run with -h, which must print the command's usage
// and exit cleanly (no container runtime is available to start the image itself).
//
// It builds for minutes and installs ko, so go test ./... leaves it out: `make images-test` runs
// it (REFLECTOR_IMAGES_TEST=1), and `make test` does so as a step of its own.
func TestImagesIntegration(t *testing.T) {
	if os.Getenv("REFLECTOR_IMAGES_TEST") != "1" {
		t.Skip("builds three images with ko: run it with make images-test (REFLECTOR_IMAGES_TEST=1)")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	reg := testenv.NewRegistry(t)
	base := pushBase(t, reg.Host())
	out := filepath.Join(t.TempDir(), "images.yaml")

	// The first build compiles every dependency with -trimpath: minutes on a small machine.
	// Stop ko before the test binary's deadline, so that a slow build fails with ko's output.
	deadline := time.Now().Add(30 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", repoRoot(t), "images",
		"KO_DOCKER_REPO="+reg.Host()+"/reflector", "IMAGES_OUT="+out)
	cmd.Env = append(os.Environ(),
		"KO_DEFAULTBASEIMAGE="+base,
		// The stand-in base has one platform; .ko.yaml's list is for real bases.
		"KO_DEFAULTPLATFORMS=linux/"+runtime.GOARCH)
	// ko runs under make: cancel the whole process group, not only make.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("make images (a first run needs more than go test's default -timeout 10m; make test gives 30m): %v\n%s", err, log.String())
	}

	images := builtImages(t, out)
	if len(images) != len(koImages) {
		t.Errorf("make images mapped %d images, want %d: %v", len(images), len(koImages), images)
	}
	for cmdName, ko := range koImages {
		t.Run(cmdName, func(t *testing.T) {
			ref, ok := images[ko]
			if !ok {
				t.Fatalf("make images did not map %s", ko)
			}
			if !strings.HasPrefix(ref, reg.Host()+"/reflector/"+cmdName+"@sha256:") {
				t.Errorf("%s was pushed as %s", ko, ref)
			}
			digest, err := name.NewDigest(ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := remote.Image(digest)
			if err != nil {
				t.Fatalf("pulling %s: %v", ref, err)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Config.User != "65532" {
				t.Errorf("%s runs as user %q, want the base's nonroot 65532", ref, cfg.Config.User)
			}
			if len(cfg.Config.Entrypoint) != 1 {
				t.Fatalf("%s entrypoint %v", ref, cfg.Config.Entrypoint)
			}
			bin := extract(t, img, cfg.Config.Entrypoint[0], t.TempDir())
			run := exec.CommandContext(ctx, bin, "-h")
			// No kubeconfig, no sink: -h must not need them.
			run.Env = []string{"HOME=" + t.TempDir()}
			usage, err := run.CombinedOutput()
			if err != nil {
				t.Fatalf("%s -h: %v\n%s", cfg.Config.Entrypoint[0], err, usage)
			}
			if !strings.Contains(string(usage), "Usage of") {
				t.Errorf("%s -h printed no usage:\n%s", cfg.Config.Entrypoint[0], usage)
			}
		})
	}

	// The mapping must reach every ko:// reference when knative/ is built with it, as
	// `kubectl apply -k knative/` does after `make images`.
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	pushed := map[string]bool{}
	for _, ref := range images {
		pushed[ref] = true
	}
	used := map[string]bool{}
	for _, obj := range buildWith(t, "transformers:\n  - images.yaml\n", map[string][]byte{"images.yaml": b}) {
		j, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(j, []byte("ko://")) {
			t.Errorf("%s still names a ko:// image", key(obj))
		}
		for _, ref := range images {
			if bytes.Contains(j, []byte(`"image":"`+ref+`"`)) {
				used[ref] = true
			}
		}
	}
	for ref := range pushed {
		if !used[ref] {
			t.Errorf("no workload of knative/ runs %s", ref)
		}
	}
}
