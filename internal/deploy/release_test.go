package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/imagereflector/reflector/internal/testenv"
)

// releasePlatforms are the platforms of a release's images, as the Makefile's
// RELEASE_PLATFORMS and .ko.yaml name them.
var releasePlatforms = []string{"linux/amd64", "linux/arm64"}

// pushBaseIndex pushes a stand-in for .ko.yaml's base: a multi-platform index of minimal images
// (no files, the nonroot user), one for each platform of a release.
func pushBaseIndex(t *testing.T, host string) string {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for _, p := range releasePlatforms {
		goos, arch, _ := strings.Cut(p, "/")
		img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
			OS: goos, Architecture: arch,
			Config: v1.Config{User: "65532", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
			RootFS: v1.RootFS{Type: "layers"},
		})
		if err != nil {
			t.Fatal(err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: arch}},
		})
	}
	ref := host + "/base/static:nonroot"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx); err != nil {
		t.Fatalf("pushing the base index: %v", err)
	}
	return ref
}

// TestReleaseIntegration runs `make release` against a registry on 127.0.0.1, with a cosign key
// pair of the test and the manifests pushed as an OCI artifact, as a maintainer does with
// docs/releasing.md (the hosting CI's workflow signs keyless instead). Then it checks what a
// user relies on: each image an index of both platforms, each platform's image with an SBOM,
// every signature one the cosign CLI verifies, install.yaml naming only images by digest that
// the registry serves, crds.yaml annotated so that Flux and Helm keep off the CRDs, the
// checksums and their signature, and the manifests artifact holding install.yaml.
//
// Cosign and every program make runs are given proxies that refuse all but 127.0.0.1: the
// test fails if anything tried to reach beyond it (Rekor, Fulcio, a TUF repository).
//
// It builds for minutes, so go test ./... leaves it out: `make release-test` runs it
// (REFLECTOR_RELEASE_TEST=1), and `make test` does so as a step of its own.
func TestReleaseIntegration(t *testing.T) {
	if os.Getenv("REFLECTOR_RELEASE_TEST") != "1" {
		t.Skip("builds three images for two platforms with ko: run it with make release-test (REFLECTOR_RELEASE_TEST=1)")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	cli := testenv.NewCosignCLI(t)
	sigKey := cli.GenerateKeyPair(t)
	flux := filepath.Join(testenv.BinDir(), "flux")
	if _, err := os.Stat(flux); err != nil {
		t.Fatalf("the flux CLI is not built (run make flux-cli): %v", err)
	}
	reg := testenv.NewRegistry(t)
	base := pushBaseIndex(t, reg.Host())
	repo := reg.Host() + "/reflector"
	dist := filepath.Join(t.TempDir(), "dist")
	const version = "v0.1.0-rc.1"

	deadline := time.Now().Add(30 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", repoRoot(t), "release",
		"VERSION="+version, "RELEASE_REPO="+repo, "DIST="+dist,
		"COSIGN="+cli.Path(), "COSIGN_KEY="+sigKey.PrivateKey(),
		// A key's signature without a transparency log entry, over plain HTTP.
		"COSIGNFLAGS=--tlog-upload=false --use-signing-config=false --allow-http-registry --allow-insecure-registry",
		"COSIGNBLOBFLAGS=--tlog-upload=false --use-signing-config=false",
		"FLUX="+flux, "RELEASE_PUSH_MANIFESTS=1", "FLUXFLAGS=--insecure-registry",
		// The CLI for this host only: the other platforms build the same way, for minutes more.
		"RELEASE_CLI_PLATFORMS=linux/"+runtime.GOARCH)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "DOCKER_CONFIG", "TUF_ROOT", "KO_DEFAULTPLATFORMS", "KOFLAGS":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(append(env, "KO_DEFAULTBASEIMAGE="+base), cli.Environ(sigKey)...)
	// ko and go run under make: cancel the whole process group, not only make.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err := cmd.Run()
	if hosts := cli.Reached(); len(hosts) > 0 {
		t.Errorf("make release tried to reach %s, beyond 127.0.0.1", strings.Join(hosts, ", "))
	}
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, log.String())
	}
	t.Logf("make release took %s", time.Since(start).Round(time.Second))

	// The files a release attaches, and nothing else.
	cliBin := "reflector-linux-" + runtime.GOARCH
	var files []string
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		files = append(files, e.Name())
	}
	want := []string{"checksums.txt", "checksums.txt.sigstore.json", "crds.yaml", "install.yaml", cliBin}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("dist/ holds %v, want %v", files, want)
	}
	checkChecksums(t, dist, slices.DeleteFunc(slices.Clone(want), func(f string) bool {
		return f == "checksums.txt.sigstore.json"
	}))
	cli.VerifyBlob(t, sigKey, filepath.Join(dist, "checksums.txt"), filepath.Join(dist, "checksums.txt.sigstore.json"))

	t.Run("crds.yaml", func(t *testing.T) {
		objs := decodeFile(t, filepath.Join(dist, "crds.yaml"))
		if len(objs) != 2 {
			t.Errorf("crds.yaml holds %d objects, want the two CRDs", len(objs))
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				t.Errorf("crds.yaml holds %s", key(o))
			}
			for k, v := range crdAnnotations {
				if got := o.GetAnnotations()[k]; got != v {
					t.Errorf("%s: annotation %s is %q, want %q", key(o), k, got, v)
				}
			}
			if got := o.GetLabels()["app.kubernetes.io/version"]; got != version {
				t.Errorf("%s: version label %q", key(o), got)
			}
		}
	})

	images := map[string]bool{}
	t.Run("install.yaml", func(t *testing.T) {
		objs := decodeFile(t, filepath.Join(dist, "install.yaml"))
		kinds := map[string]bool{}
		for _, o := range objs {
			kinds[o.GetKind()] = true
			if o.GetKind() == "CustomResourceDefinition" {
				t.Errorf("install.yaml holds %s: kubectl delete -f install.yaml would delete it", key(o))
			}
			if got := o.GetLabels()["app.kubernetes.io/version"]; got != version {
				t.Errorf("%s: version label %q", key(o), got)
			}
			j, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(j, []byte("ko://")) {
				t.Errorf("%s names a ko:// image", key(o))
			}
			if o.GetKind() == "Deployment" && o.GetName() == "reflector-store" {
				// The store's anchor runs a public pause image, pinned by digest in knative/.
				walkImageFields(o.Object, func(image string) {
					if _, digest, ok := strings.Cut(image, "@sha256:"); !ok || len(digest) != 64 {
						t.Errorf("the store's anchor runs %s, not an image pinned by digest", image)
					}
				})
				continue
			}
			walkImageFields(o.Object, func(image string) { images[image] = true })
		}
		for _, k := range []string{"Namespace", "Service", "CronJob", "Broker", "Trigger"} {
			if !kinds[k] {
				t.Errorf("install.yaml has no %s", k)
			}
		}
		var cmds []string
		for ref := range images {
			cmdName, _, ok := strings.Cut(strings.TrimPrefix(ref, repo+"/"), "@sha256:")
			if !strings.HasPrefix(ref, repo+"/") || !ok {
				t.Errorf("install.yaml runs %s, not an image of %s by digest", ref, repo)
				continue
			}
			cmds = append(cmds, cmdName)
		}
		slices.Sort(cmds)
		if want := []string{"cron", "policy", "scan"}; !slices.Equal(cmds, want) {
			t.Errorf("install.yaml runs images of %v, want one each of %v", cmds, want)
		}
	})

	for ref := range images {
		t.Run(ref[len(repo)+1:strings.Index(ref, "@")], func(t *testing.T) {
			checkReleaseImage(t, cli, sigKey, ref, version)
		})
	}
	// The verifications above mean something only if cosign refuses another key.
	for ref := range images {
		cli.VerifyFails(t, cli.GenerateKeyPair(t), ref)
		break
	}

	t.Run("manifests artifact", func(t *testing.T) {
		tag, err := name.NewTag(repo + "/manifests:" + version)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(tag)
		if err != nil {
			t.Fatalf("pulling %s: %v", tag, err)
		}
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		cli.Verify(t, sigKey, repo+"/manifests@"+digest.String())
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("the artifact has %d layers (%v), want one", len(layers), err)
		}
		got := untarFiles(t, layers[0])
		wantInstall, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !bytes.Equal(got["install.yaml"], wantInstall) {
			names := make([]string, 0, len(got))
			for n := range got {
				names = append(names, n)
			}
			t.Errorf("the artifact holds %v, want install.yaml as dist/ has it", names)
		}
	})

	t.Run("the reflector CLI", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(dist, cliBin)).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage: reflector check") {
			t.Errorf("%s without arguments: %v, want its usage and exit code 2:\n%s", cliBin, err, out)
		}
	})
}

// checkReleaseImage checks one image of a release, ref (repo@digest): an index of both
// platforms that the version's tag names, each platform's image built on the base's user with
// an SPDX SBOM beside it, and signatures of the index and of each platform's image that the
// cosign CLI verifies with the release key.
func checkReleaseImage(t *testing.T, cli *testenv.CosignCLI, key *testenv.CosignCLIKey, ref, version string) {
	digest, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	tagged, err := remote.Head(digest.Context().Tag(version))
	if err != nil {
		t.Fatalf("the tag %s: %v", version, err)
	}
	if tagged.Digest.String() != digest.DigestStr() {
		t.Errorf("the tag %s names %s, install.yaml %s", version, tagged.Digest, digest.DigestStr())
	}
	idx, err := remote.Index(digest)
	if err != nil {
		t.Fatalf("%s is not an image index: %v", ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			t.Errorf("%s: a manifest without a platform: %s", ref, m.Digest)
			continue
		}
		p := m.Platform.OS + "/" + m.Platform.Architecture
		platforms = append(platforms, p)
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS+"/"+cfg.Architecture != p {
			t.Errorf("%s: the %s image's config says %s/%s", ref, p, cfg.OS, cfg.Architecture)
		}
		if cfg.Config.User != "65532" {
			t.Errorf("%s: the %s image runs as %q, want the base's nonroot 65532", ref, p, cfg.Config.User)
		}
		if got := cfg.Config.Labels["org.opencontainers.image.version"]; got != version {
			t.Errorf("%s: the %s image's version label is %q", ref, p, got)
		}
		sbom := digest.Context().Tag(strings.Replace(m.Digest.String(), ":", "-", 1) + ".sbom")
		desc, err := remote.Get(sbom)
		if err != nil {
			t.Errorf("%s: no SBOM for the %s image at %s: %v", ref, p, sbom, err)
		} else if !strings.Contains(string(desc.Manifest), "spdx") {
			t.Errorf("%s: the SBOM of the %s image is not SPDX: %s", ref, p, desc.Manifest)
		}
		cli.Verify(t, key, digest.Context().Name()+"@"+m.Digest.String())
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, releasePlatforms) {
		t.Errorf("%s holds the platforms %v, want %v", ref, platforms, releasePlatforms)
	}
	cli.Verify(t, key, ref)
}

// checkChecksums checks that checksums.txt lists every other file of dir with its SHA-256, as
// `sha256sum -c` would.
func checkChecksums(t *testing.T, dir string, files []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("checksums.txt: not a sha256sum line: %q", sc.Text())
		}
		listed[file] = sum
	}
	for _, file := range files {
		if file == "checksums.txt" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := listed[file]; got != hex.EncodeToString(sum[:]) {
			t.Errorf("checksums.txt lists %s as %q, its SHA-256 is %x", file, got, sum)
		}
		delete(listed, file)
	}
	for file := range listed {
		t.Errorf("checksums.txt lists %s, which dist/ does not hold", file)
	}
}

// walkImageFields calls f with every "image" field's value in v.
func walkImageFields(v any, f func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "image" {
				f(s)
				continue
			}
			walkImageFields(x, f)
		}
	case []any:
		for _, x := range v {
			walkImageFields(x, f)
		}
	}
}

// untarFiles reads the regular files of a gzipped tar layer, by name.
func untarFiles(t *testing.T, layer v1.Layer) map[string][]byte {
	t.Helper()
	rc, err := layer.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatalf("the artifact's layer is not gzipped: %v", err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Clean(h.Name)] = b
	}
}

func decodeFile(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeYAML(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return objs
}
