package preflight

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The Knative modules whose CRDs and ConfigMaps the test installs, as internal/deploy's tests do.
const (
	servingModule  = "knative.dev/serving@v0.50.0"
	eventingModule = "knative.dev/eventing@v0.50.0"
)

// moduleDir downloads mod into the module cache (outside this module, so go.mod stays as it
// is) and returns its directory.
func moduleDir(t *testing.T, mod string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Error != "" || info.Dir == "" {
		t.Fatalf("the Knative manifests come from the Go module %s, which could not be downloaded: %v %s", mod, err, info.Error)
	}
	return info.Dir
}

func apply(t *testing.T, env *testenv.Env, files ...string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Apply(context.Background(), "", b); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// fluxPolicyCRD serves Flux's ImagePolicy CRD (`make flux-crds`) as a cluster that ran Flux
// before 2.7 holds it: no spec.verify in v1, and besides v1 a v1beta2 that is still served and
// among the stored versions. Flux's CRDs of today serve v1 alone: the old version is added,
// with v1's schema, as the CRDs of those releases had it.
func fluxPolicyCRD(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	obj, err := testenv.FluxCRD("imagepolicies")
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("Flux's ImagePolicy CRD serves %d versions, want v1 alone", len(versions))
	}
	v1 := versions[0].(map[string]any)
	beta := map[string]any{"name": "v1beta2", "served": true, "storage": false, "schema": v1["schema"], "subresources": v1["subresources"]}
	if err := unstructured.SetNestedSlice(obj.Object, []any{beta, v1}, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	// Flux's and reflector's CRDs are applied by different managers; a test takes Flux's over.
	if _, err := env.Dynamic().Resource(crdResource).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "kustomize-controller", Force: true}); err != nil {
		t.Fatalf("applying Flux's CRD: %v", err)
	}
	if _, err := env.Dynamic().Resource(crdResource).Patch(ctx, obj.GetName(), types.MergePatchType,
		[]byte(`{"status":{"storedVersions":["v1beta2","v1"]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("storedVersions: %v", err)
	}
}

// results are the checks' results by name.
type results map[string]Result

func run(t *testing.T, env *testenv.Env) results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Gather(ctx, clientset.For(env), env.Dynamic())
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := results{}
	for _, r := range Run(ctx, c, Options{Pre: true}) {
		out[r.Name] = r
	}
	return out
}

// expect checks that the result of check passed or failed, and that its message and fix say
// the given words.
func (rs results) expect(t *testing.T, check string, ok bool, message string, fix ...string) {
	t.Helper()
	r, found := rs[check]
	if !found {
		t.Errorf("no result for %s", check)
		return
	}
	want(t, r, ok, []string{message}, fix...)
}

// TestGatherIntegration runs the checks against a real apiserver as a cluster that ran Flux
// before 2.7 meets them, then with Knative installed as it ships (its features off), then with
// the fixes applied. Its apiserver is this test binary's own: the test changes the CRDs.
func TestGatherIntegration(t *testing.T) {
	env := testenv.Kube(t)
	fluxPolicyCRD(t, env)

	results := run(t, env)
	// The apiserver of `make testenv` is built without a release version; the node's is stamped.
	if v, err := clientset.For(env).Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	} else if strings.HasPrefix(v.GitVersion, "v0.0.0") {
		results.expect(t, "Kubernetes", false, "no release version", "1.32")
	} else {
		results.expect(t, "Kubernetes", true, v.GitVersion)
	}
	results.expect(t, "ImagePolicy schema", false, "no spec.verify", "kubectl apply --server-side")
	results.expect(t, "CRD "+PolicyCRD, false, "v1beta2", "kubectl get imagepolicies -A -o json | kubectl replace -f -", "--subresource=status")
	results.expect(t, "CRD "+RepositoryCRD, true, "v1")
	results.expect(t, "StorageClass", false, "no StorageClass", "kind: StorageClass")
	results.expect(t, "Knative Serving", false, "not installed", "serving-core.yaml")
	results.expect(t, "Knative Eventing", false, "not installed", "eventing-core.yaml")
	results.expect(t, "Knative Serving features", false, "kubernetes.podspec-persistent-volume-claim", "kubectl patch configmap config-features -n knative-serving")
	results.expect(t, "Knative Eventing OIDC", false, "authentication-oidc", `"authentication-oidc":"enabled"`)
	results.expect(t, "Flux", true, "not installed")
	if _, found := results["Webhook route"]; found {
		t.Error("--pre checked the webhook route")
	}

	serving, eventing := moduleDir(t, servingModule), moduleDir(t, eventingModule)
	t.Run("Knative as it ships", func(t *testing.T) {
		apply(t, env, filepath.Join(serving, "config", "core", "300-resources", "service.yaml"),
			filepath.Join(eventing, "config", "core", "resources", "broker.yaml"))
		if _, err := env.Apply(context.Background(), "", []byte(
			"apiVersion: v1\nkind: Namespace\nmetadata: {name: knative-serving}\n---\n"+
				"apiVersion: v1\nkind: Namespace\nmetadata: {name: knative-eventing}\n")); err != nil {
			t.Fatal(err)
		}
		apply(t, env, filepath.Join(serving, "config", "core", "configmaps", "features.yaml"),
			filepath.Join(eventing, "config", "core", "configmaps", "features.yaml"),
			filepath.Join(eventing, "config", "core", "configmaps", "default-broker.yaml"))
		results = run(t, env)
		results.expect(t, "Knative Serving", false, "controller", "kubectl -n knative-serving get deployments")
		results.expect(t, "Knative Serving features", false, "kubernetes.podspec-affinity",
			`"kubernetes.podspec-persistent-volume-claim":"enabled"`, `"kubernetes.podspec-securitycontext":"enabled"`)
		results.expect(t, "Knative Eventing OIDC", false, "not enabled", `"authentication-oidc":"enabled"`)
		results.expect(t, "Broker", false, "mt-broker-controller", "mt-channel-broker.yaml")
	})

	t.Run("fixed", func(t *testing.T) {
		ctx := context.Background()
		flags := map[string]string{"authentication-oidc": "enabled"}
		for _, f := range ServingFlags {
			flags[f] = "enabled"
		}
		for _, ns := range []string{"knative-serving", "knative-eventing"} {
			patch, _ := json.Marshal(map[string]any{"data": flags})
			if _, err := clientset.For(env).CoreV1().ConfigMaps(ns).Patch(ctx, "config-features", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := env.Apply(ctx, "", []byte(`apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
`)); err != nil {
			t.Fatal(err)
		}
		// The fix's order: storedVersions first, then reflector's CRD, which the apiserver
		// refuses while v1beta2 is listed.
		if _, err := env.Dynamic().Resource(crdResource).Patch(ctx, PolicyCRD, types.MergePatchType,
			[]byte(`{"status":{"storedVersions":["v1"]}}`), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("storedVersions: %v", err)
		}
		if err := env.InstallCRDs(ctx); err != nil {
			t.Fatalf("reflector's CRDs over Flux's: %v", err)
		}
		results = run(t, env)
		for _, name := range []string{"Knative Serving features", "Knative Eventing OIDC", "StorageClass", "ImagePolicy schema", "CRD " + PolicyCRD} {
			results.expect(t, name, true, "")
		}
	})
}
