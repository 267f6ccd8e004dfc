package node_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/imagereflector/reflector/internal/node"
)

// TestNodeImagesIntegration builds reflector's three images with `make images` inside the
// node's namespaces, on the node's base image and into the node's registry, as a cluster admin
// would with KO_DOCKER_REPO, and checks what images.yaml points at: an image in the registry for
// each command, for linux/amd64, running as the base image's non-root user.
func TestNodeImagesIntegration(t *testing.T) {
	if os.Getenv("REFLECTOR_CLUSTER_TEST") == "" {
		t.Skip("starts a single-node cluster in a network namespace, as root: make cluster-test (REFLECTOR_CLUSTER_TEST=1)")
	}
	c, err := node.Start(context.Background(), node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	b := makeImages(t, c)
	pinned := regexp.MustCompile(`newName: (\S+)\n\s+digest: (sha256:[0-9a-f]{64})`).FindAllStringSubmatch(string(b), -1)
	if len(pinned) != 3 {
		t.Fatalf("images.yaml pins %d images, want 3:\n%s", len(pinned), b)
	}
	for _, p := range pinned {
		repo, ok := strings.CutPrefix(p[1], c.Registry.NodeHost+"/")
		if !ok {
			t.Errorf("%s is not in the node's registry %s", p[1], c.Registry.NodeHost)
			continue
		}
		ref, err := name.NewDigest(c.Registry.Host+"/"+repo+"@"+p[2], name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.User != "65532" {
			t.Errorf("%s: %s/%s, user %q; want linux/amd64 and 65532", repo, cf.OS, cf.Architecture, cf.Config.User)
		}
	}
}

// prepareBuild installs ko and downloads the modules the programs build from, and returns the
// source tree's root: both come from the module proxy, which the node's namespace cannot reach,
// and on a fresh machine nothing else has fetched them yet.
func prepareBuild(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-C", root, "ko").CombinedOutput(); err != nil {
		t.Fatalf("make ko: %v\n%s", err, out)
	}
	download := exec.Command("go", "mod", "download")
	download.Dir = root
	if out, err := download.CombinedOutput(); err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	return root
}

// makeImages runs `make images` inside the node's namespaces, on the node's base image and into
// the node's registry, as a cluster admin would with KO_DOCKER_REPO, and returns the
// images.yaml it wrote.
func makeImages(t *testing.T, c *node.Cluster) []byte {
	t.Helper()
	root := prepareBuild(t)
	out := filepath.Join(t.TempDir(), "images.yaml")
	argv := c.NS.Wrap([]string{"make", "-C", root, "images",
		"KO_DOCKER_REPO=" + c.Registry.NodeHost + "/reflector", "IMAGES_OUT=" + out, "KOFLAGS=--platform=linux/amd64"})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "KO_DEFAULTBASEIMAGE="+c.Images["base"], "GOPROXY=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make images: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
