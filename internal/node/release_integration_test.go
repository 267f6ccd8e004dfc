package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/imagereflector/reflector/internal/node"
	"github.com/imagereflector/reflector/internal/testenv"
)

// nodeVersion is the version of the release that the node test builds and installs.
const nodeVersion = "v0.0.0-node"

// release is what `make release` wrote for the node: its dist directory, with crds.yaml,
// install.yaml, checksums.txt and the reflector CLI for linux/amd64.
type release struct {
	dist string
}

// file is the path of one of the release's files.
func (r *release) file(name string) string { return filepath.Join(r.dist, name) }

var (
	crds         = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	repositories = schema.GroupVersionResource{Group: "image.toolkit.fluxcd.io", Version: "v1", Resource: "imagerepositories"}
	imageCRDs    = []string{"imagerepositories.image.toolkit.fluxcd.io", "imagepolicies.image.toolkit.fluxcd.io"}
)

// installRelease installs reflector on the node as a Flux user does who switches from Flux's
// image-reflector-controller: Flux's own v1 CRDs are there first, with an ImageRepository and an
// ImagePolicy made under them (startPushes'); then docs/migrate.md's steps 1 and 2, `reflector
// check --pre` (which must find Flux's ImagePolicy CRD and nothing else wrong), and docs/install.md's
// commands with the bundle that `make release` wrote, its images in the node's registry by
// digest. It returns once every object of install.yaml is Ready.
func installRelease(ctx context.Context, t *testing.T, c *node.Cluster, ca *routeCA) (*release, *pushes) {
	t.Helper()
	step := time.Now()
	fluxCRDs(ctx, t, c)
	p := startPushes(ctx, t, c, ca)
	// lifecycle deletes the ImageRepository app; kept, suspended, stays to the uninstall.
	if _, err := c.Apply(ctx, "", []byte(fmt.Sprintf(`apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: kept
  namespace: %s
spec:
  image: %s
  insecure: true
  interval: 1h
  suspend: true
`, p.namespace, p.repo))); err != nil {
		t.Fatal(err)
	}
	t.Logf("Flux's CRDs, ImageRepositories and an ImagePolicy under them in %s", time.Since(step).Round(time.Second))

	step = time.Now()
	rel := makeRelease(t, c)
	t.Logf("make release (linux/amd64 only) took %s", time.Since(step).Round(time.Second))

	// docs/migrate.md, step 1: Flux must not prune the CRDs it no longer installs (the node runs
	// no Flux controller: the annotations are what is checked); step 2: v1 is the only stored
	// version, as on a cluster that never ran Flux before 2.7.
	shell(ctx, t, c, rel.dist, docBlock(t, "migrate.md", "### 1. Take image-reflector-controller out of Flux's components", 0))
	for _, n := range imageCRDs {
		obj, err := c.Dynamic().Resource(crds).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.GetAnnotations()["kustomize.toolkit.fluxcd.io/prune"]; got != "disabled" {
			t.Errorf("%s: kustomize.toolkit.fluxcd.io/prune is %q after migrate.md's step 1", n, got)
		}
	}
	stored := shell(ctx, t, c, rel.dist, docBlock(t, "migrate.md", "### 2. Make `v1` the only stored version", 0))
	for _, n := range imageCRDs {
		if !strings.Contains(stored, n+`: ["v1"]`) {
			t.Errorf("migrate.md's storedVersions command printed, for Flux's CRDs of a fresh cluster:\n%s\nwant %s: [\"v1\"]", stored, n)
		}
	}

	// Before the install, Flux's ImagePolicy CRD is served: the one thing --pre must find.
	out, code := reflectorCheck(ctx, t, c, rel, "--pre")
	if code != 1 || !slices.Equal(failedChecks(out), []string{"ImagePolicy schema"}) {
		t.Errorf("reflector check --pre over Flux's CRDs: exit code %d, failed %v; want 1 and only the ImagePolicy schema:\n%s", code, failedChecks(out), out)
	}

	// docs/install.md's kubectl install, from the directory that holds the bundle: the download
	// is the one step left out, the checksums are checked as the doc says. The test's push
	// registry listens at the node's address, a private one, which the functions reach only when
	// the administrator allows it: install.yaml goes in through the doc's overlay that does.
	step = time.Now()
	var install []string
	for _, line := range strings.Split(docBlock(t, "install.md", "**With kubectl:**", 0), "\n") {
		if strings.HasPrefix(line, "VERSION=") || strings.HasPrefix(line, "BASE=") || strings.HasPrefix(line, "curl ") {
			continue
		}
		install = append(install, line)
	}
	script := strings.Join(install, "\n")
	for _, cmd := range []string{"sha256sum -c checksums.txt", "kubectl apply --server-side --force-conflicts -f crds.yaml", "kubectl apply -f install.yaml"} {
		if !strings.Contains(script, cmd) {
			t.Fatalf("docs/install.md's install lacks %q:\n%s", cmd, script)
		}
	}
	script = strings.Replace(script, "kubectl apply -f install.yaml", "", 1)
	overlay := docBlock(t, "install.md", "**Settings of your cluster**", 0)
	const documented = `value: "10.20.0.5:5000"`
	if !strings.Contains(overlay, documented) || !strings.HasSuffix(overlay, "\nkubectl apply -k .") {
		t.Fatalf("docs/install.md's overlay for a registry on a private network is not what the test expects:\n%s", overlay)
	}
	overlay = strings.Replace(overlay, documented, fmt.Sprintf(`value: "%s:%d"`, node.NodeIP, pushRegistryPort), 1)
	// The node pulls nothing from outside: the store's anchor runs the node's pause image, as a
	// cluster without the internet runs a mirror's.
	overlay = strings.Replace(overlay, "\nEOF\n", fmt.Sprintf(`
  - target: {group: apps, kind: Deployment, name: reflector-store}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/image
        value: %s
EOF
`, c.Images["pause"]), 1)
	shell(ctx, t, c, rel.dist, script+"\n"+overlay)
	kinds := "ksvc,broker,trigger,apiserversource,sinkbinding"
	if _, err := c.Kubectl(ctx, nil, "wait", "--for=condition=Ready", kinds, "--all", "-n", "reflector-system", "--timeout=6m"); err != nil {
		out, _ := c.Kubectl(ctx, nil, "get", kinds, "-n", "reflector-system")
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := c.Clientset().BatchV1().CronJobs("reflector-system").Get(ctx, "reflector-cron", metav1.GetOptions{}); err != nil {
		t.Errorf("the cron reconciler's CronJob: %v", err)
	}
	// reflector's CRDs now serve ImagePolicy's spec.verify, and kubectl took them over from
	// Flux's manager.
	pol, err := c.Dynamic().Resource(crds).Get(ctx, imageCRDs[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := pol.MarshalJSON(); !bytes.Contains(j, []byte(`"verify"`)) {
		t.Error("after crds.yaml the served ImagePolicy CRD has no spec.verify: Flux's is still served")
	}
	if got := pol.GetLabels()["app.kubernetes.io/version"]; got != nodeVersion {
		t.Errorf("the ImagePolicy CRD's version label is %q, want %s", got, nodeVersion)
	}
	t.Logf("install.md's install was Ready in %s", time.Since(step).Round(time.Second))
	return rel, p
}

// fluxCRDs applies Flux's image.toolkit.fluxcd.io CRDs, generated by `make flux-crds` from
// Flux's API types at the version of the flux CLI of `make flux-cli`, as `flux bootstrap` leaves
// them: applied server-side by kustomize-controller, with the labels of Flux's install and of
// the flux-system Kustomization.
func fluxCRDs(ctx context.Context, t *testing.T, c *node.Cluster) {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, n := range imageCRDs {
		obj, err := testenv.FluxCRD(strings.TrimSuffix(n, ".image.toolkit.fluxcd.io"))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj)
	}
	// The flux CLI's version, which Flux's install puts on every object it makes.
	cli, err := os.Readlink(filepath.Join(testenv.BinDir(), "flux"))
	if err != nil || !strings.HasPrefix(cli, "flux-v") {
		t.Fatalf("the flux CLI of `make flux-cli`: %q, %v", cli, err)
	}
	for _, obj := range objs {
		obj.SetLabels(map[string]string{
			"app.kubernetes.io/component":           "image-reflector-controller",
			"app.kubernetes.io/instance":            "flux-system",
			"app.kubernetes.io/part-of":             "flux",
			"app.kubernetes.io/version":             strings.TrimPrefix(cli, "flux-"),
			"kustomize.toolkit.fluxcd.io/name":      "flux-system",
			"kustomize.toolkit.fluxcd.io/namespace": "flux-system",
		})
		if _, err := c.Dynamic().Resource(crds).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "kustomize-controller", Force: true}); err != nil {
			t.Fatalf("applying Flux's %s: %v", obj.GetName(), err)
		}
	}
	for _, n := range imageCRDs {
		if _, err := c.Kubectl(ctx, nil, "wait", "--for=condition=Established", "crd/"+n, "--timeout=1m"); err != nil {
			t.Fatal(err)
		}
	}
}

// makeRelease runs `make release` inside the node's namespaces as docs/releasing.md's
// maintainer does, into the node's registry, on the node's base image, signed with a cosign
// key of the test (no transparency log, nothing beyond the node's namespace), for linux/amd64
// alone (RELEASE_PLATFORMS; arm64 would only double ko's minutes), and checks what install.yaml
// names: every image by digest in the node's registry, present there.
func makeRelease(t *testing.T, c *node.Cluster) *release {
	t.Helper()
	root := prepareBuild(t)
	cli := testenv.NewCosignCLI(t)
	key := cli.GenerateKeyPair(t)
	rel := &release{dist: filepath.Join(t.TempDir(), "dist")}
	argv := c.NS.Wrap([]string{"make", "--no-print-directory", "-C", root, "release",
		"VERSION=" + nodeVersion, "RELEASE_REPO=" + c.Registry.NodeHost + "/reflector", "DIST=" + rel.dist,
		"RELEASE_PLATFORMS=linux/amd64", "RELEASE_CLI_PLATFORMS=linux/amd64",
		"COSIGN=" + cli.Path(), "COSIGN_KEY=" + key.PrivateKey(),
		"COSIGNFLAGS=--tlog-upload=false --use-signing-config=false --allow-http-registry --allow-insecure-registry",
		"COSIGNBLOBFLAGS=--tlog-upload=false --use-signing-config=false"})
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "DOCKER_CONFIG", "TUF_ROOT", "KO_DEFAULTPLATFORMS", "KOFLAGS":
			continue
		}
		env = append(env, kv)
	}
	// The cosign CLI's environment without its guard's proxies: the guard listens on the
	// host's loopback, which the node's namespace cannot reach, and the namespace has no route
	// beyond the node anyway.
	for _, kv := range cli.Environ(key) {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(env, "KO_DEFAULTBASEIMAGE="+c.Images["base"], "GOPROXY=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, b)
	}

	install, err := os.ReadFile(rel.file("install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	imageRef := regexp.MustCompile(`image: (\S+)`)
	images := imageRef.FindAllStringSubmatch(string(install), -1)
	// The store's anchor runs a public pause image, pinned by digest in knative/store.yaml.
	store, err := os.ReadFile("../../knative/store.yaml")
	if err != nil {
		t.Fatal(err)
	}
	anchorImage := ""
	if m := imageRef.FindSubmatch(store); m != nil {
		anchorImage = string(m[1])
	}
	if len(images) < 3 {
		t.Fatalf("install.yaml names %d images, want the three of scan, policy and cron", len(images))
	}
	for _, m := range images {
		img := strings.Trim(m[1], `"`)
		repo, digest, ok := strings.Cut(strings.TrimPrefix(img, c.Registry.NodeHost+"/"), "@")
		if img == anchorImage {
			continue // the store's anchor; the install's overlay maps it to the node's pause image
		}
		if !ok || !strings.HasPrefix(img, c.Registry.NodeHost+"/reflector/") {
			t.Errorf("install.yaml names %s, not an image of the node's registry by digest", img)
			continue
		}
		ref, err := name.NewDigest(c.Registry.Host+"/"+repo+"@"+digest, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Head(ref); err != nil {
			t.Errorf("%s: %v", img, err)
		}
	}
	return rel
}

// docBlock returns the index-th ```sh block after the line that starts with heading in
// docs/<doc>.
func docBlock(t *testing.T, doc, heading string, index int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../docs", doc))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("docs/%s has no line %q", doc, heading)
	}
	blocks := regexp.MustCompile("(?ms)^\\s*```sh\n(.*?)^\\s*```$").FindAllStringSubmatch(after, index+1)
	if len(blocks) <= index {
		t.Fatalf("docs/%s has no sh block %d after %q", doc, index, heading)
	}
	// A block inside a list item is indented: the fence's indentation goes.
	lines := strings.Split(strings.TrimRight(blocks[index][1], "\n"), "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		lines[i] = l[min(indent, len(l)-len(strings.TrimLeft(l, " "))):]
	}
	return strings.Join(lines, "\n")
}

// shell runs script with sh -e inside the node's namespaces, in dir, with the node's kubectl
// first on PATH and the admin kubeconfig in KUBECONFIG, as a user at a terminal runs a doc's
// commands, and returns what it printed.
func shell(ctx context.Context, t *testing.T, c *node.Cluster, dir, script string) string {
	t.Helper()
	argv := c.NS.WrapIn(dir, []string{"/bin/sh", "-ec", script})
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + filepath.Dir(c.Bin("kubectl")) + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "KUBECONFIG=" + c.Kubeconfig}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s\n%v\n%s", script, err, out)
	}
	t.Logf("$ %s\n%s", strings.ReplaceAll(script, "\n", "\n$ "), out)
	return string(out)
}

// reflectorCheck runs the release's `reflector check` with args inside the node's namespaces
// and returns what it printed and its exit code.
func reflectorCheck(ctx context.Context, t *testing.T, c *node.Cluster, rel *release, args ...string) (string, int) {
	t.Helper()
	argv := c.NS.Wrap(append([]string{rel.file("reflector-linux-amd64"), "check", "--kubeconfig=" + c.Kubeconfig}, args...))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "NO_COLOR=1"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("reflector check: %v\n%s", err, out)
	return "", 0
}

// failedChecks returns the names of the checks that `reflector check` printed as failed.
func failedChecks(out string) []string {
	var failed []string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "✗ "); ok {
			n, _, _ := strings.Cut(rest, ": ")
			failed = append(failed, n)
		}
	}
	return failed
}

// checkInstalled runs `reflector check` on the installed release: every check green, the
// webhook route asked for its /healthz over TLS, its certificate trusted through --ca-file (the
// node's route CA). Without --ca-file the route's certificate is not trusted: the one failure,
// with its fix.
func checkInstalled(ctx context.Context, t *testing.T, c *node.Cluster, rel *release, p *pushes) {
	t.Helper()
	// The check asks the route with a timeout of seconds: a warm webhook answers in time.
	p.healthz(ctx, t)
	out, code := reflectorCheck(ctx, t, c, rel, "--ca-file="+p.ca.file)
	if code != 0 {
		t.Errorf("reflector check --ca-file: exit code %d, failed %v:\n%s", code, failedChecks(out), out)
	} else if !strings.Contains(out, "✔ Webhook route: https://"+p.host+" answers over TLS") {
		t.Errorf("reflector check did not report the webhook route https://%s over TLS:\n%s", p.host, out)
	}
	t.Logf("reflector check --ca-file:\n%s", out)

	p.healthz(ctx, t)
	out, code = reflectorCheck(ctx, t, c, rel)
	if code != 1 || !slices.Equal(failedChecks(out), []string{"Webhook route"}) ||
		!strings.Contains(out, "certificate is not trusted") || !strings.Contains(out, "reflector check --ca-file=") {
		t.Errorf("reflector check without the route CA: exit code %d, failed %v; want 1, the webhook route's certificate not trusted and --ca-file as the fix:\n%s", code, failedChecks(out), out)
	}
	t.Logf("reflector check without --ca-file:\n%s", out)
}

// uninstall runs docs/install.md's uninstall with the release's install.yaml and checks that
// the CRDs, the ImageRepository kept and the ImagePolicy (both made under Flux's CRDs) are
// left with their status, and reflector's namespace is not.
func uninstall(ctx context.Context, t *testing.T, c *node.Cluster, rel *release, p *pushes) {
	t.Helper()
	script := docBlock(t, "install.md", "## Uninstall", 0)
	if !strings.HasPrefix(script, "kubectl delete -f install.yaml") || strings.Contains(script, "\n") {
		t.Fatalf("docs/install.md's uninstall is %q, not one kubectl delete of install.yaml", script)
	}
	back := docBlock(t, "migrate.md", "## From reflector back to Flux", 0)
	if cmd, _, _ := strings.Cut(back, "#"); strings.TrimSpace(cmd) != script {
		t.Errorf("docs/migrate.md's way back removes reflector with %q, install.md with %q", back, script)
	}
	step := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	shell(dctx, t, c, rel.dist, script)
	t.Logf("kubectl delete -f install.yaml took %s", time.Since(step).Round(time.Second))
	for _, n := range imageCRDs {
		if _, err := c.Dynamic().Resource(crds).Get(ctx, n, metav1.GetOptions{}); err != nil {
			t.Errorf("the CRD %s after the uninstall: %v", n, err)
		}
	}
	if _, err := c.Dynamic().Resource(repositories).Namespace(p.namespace).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Errorf("the ImageRepository after the uninstall: %v", err)
	}
	if got := p.latest(ctx, t); got == "" {
		t.Error("the ImagePolicy lost its latestRef in the uninstall")
	}
	if _, err := c.Clientset().CoreV1().Namespaces().Get(ctx, "reflector-system", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the namespace reflector-system after the uninstall: %v", err)
	}
}
