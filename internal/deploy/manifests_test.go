package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
	"github.com/imagereflector/reflector/internal/webhook"
)

// The Knative releases whose CRDs the dry runs check the manifests against: the ones
// hack/knative.sh builds (hack/tools/knative*/go.mod), whose control planes
// TestKnativeIntegration runs. The proxy does not list eventing's versions, so both are pinned
// exactly.
const (
	servingModule  = "knative.dev/serving@v0.50.0"
	eventingModule = "knative.dev/eventing@v0.50.0"
)

// namespace is where knative/ installs reflector.
const namespace = "reflector-system"

// koImages are the ko:// references in knative/, by command.
var koImages = map[string]string{
	"scan":   "ko://github.com/imagereflector/reflector/cmd/scan",
	"policy": "ko://github.com/imagereflector/reflector/cmd/policy",
	"cron":   "ko://github.com/imagereflector/reflector/cmd/cron",
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// repoRoot is the module's root directory, found from this file's location.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test's source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// build runs kustomize on an overlay of knative/ that adds the given kustomization lines
// (an images:, transformers: or components: section), as `kubectl apply -k` would after
// `make images`.
func build(t testing.TB, overlay string) []*unstructured.Unstructured {
	t.Helper()
	return buildWith(t, overlay, nil)
}

// buildWith is build with more files beside the overlay's kustomization, such as a
// transformer configuration it names.
func buildWith(t testing.TB, overlay string, files map[string][]byte) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// kustomize refuses an absolute path to a base.
	base, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "knative"))
	if err != nil {
		t.Fatal(err)
	}
	// The overlay names knative/ (and its components) as {{knative}}.
	overlay = strings.ReplaceAll(overlay, "{{knative}}", base)
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n%s", base, overlay)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	// The overlay lives in a temporary directory outside the repository.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build knative/: %v", err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// placeholderImages is an overlay that maps the ko:// references to registry images, as
// `make images` does with the digests it pushed.
func placeholderImages() string {
	var b strings.Builder
	b.WriteString("images:\n")
	for cmd, ref := range koImages {
		fmt.Fprintf(&b, "  - name: %s\n    newName: registry.example.com/reflector/%s\n    newTag: v0.0.0\n", ref, cmd)
	}
	return b.String()
}

// moduleDir returns where the Go module cache holds mod (path@version), downloading it if the
// cache does not have it yet.
func moduleDir(t testing.TB, mod string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	// Outside the module, so that the download cannot touch go.mod.
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Error != "" || info.Dir == "" {
		t.Fatalf("the Knative CRDs come from the Go module %s, which could not be downloaded "+
			"(the Go module proxy must be reachable once, or GOFLAGS=-mod=mod with a warm module cache): %v %s %s",
			mod, err, info.Error, stderr(err))
	}
	return info.Dir
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// installKnativeCRDs installs the CRDs of Knative Serving and Eventing from their Go modules.
// Their conversion webhooks point at knative-serving and knative-eventing webhook Services that
// do not exist here; every version of those CRDs has the same schema, so conversion None
// serves them alike. Knative's admission webhooks (defaulting, and validation beyond the
// OpenAPI schema, such as the feature flags) cannot run here either.
func installKnativeCRDs(t testing.TB, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	dirs := []string{
		filepath.Join(moduleDir(t, servingModule), "config", "core", "300-resources"),
		filepath.Join(moduleDir(t, eventingModule), "config", "core", "resources"),
	}
	var names []string
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no CRDs in %s: %v", dir, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := testenv.DecodeYAML(b)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, crd := range objs {
				if crd.GetKind() != "CustomResourceDefinition" {
					continue
				}
				if err := unstructured.SetNestedField(crd.Object, map[string]any{"strategy": "None"}, "spec", "conversion"); err != nil {
					t.Fatal(err)
				}
				if _, err := env.Dynamic().Resource(crdGVR).Apply(ctx, crd.GetName(), crd,
					metav1.ApplyOptions{FieldManager: "reflector-deploy-test", Force: true}); err != nil {
					t.Fatalf("installing %s from %s: %v", crd.GetName(), f, err)
				}
				names = append(names, crd.GetName())
			}
		}
	}
	for _, name := range names {
		waitEstablished(t, env, name)
	}
}

func waitEstablished(t testing.TB, env *testenv.Env, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		obj, err := env.Dynamic().Resource(crdGVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("CRD %s: %w", name, err)
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("CRD %s not established", name)
	})
}

// applier server-side applies objects through the dynamic client, finding each one's
// resource by discovery.
type applier struct {
	dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(env *testenv.Env) *applier {
	return &applier{
		dynamic: env.Dynamic(),
		mapper:  restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(clientset.For(env).Discovery())),
	}
}

// apply applies obj; dryRun asks the apiserver to validate, default and admit it without
// storing it.
func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		a.mapper.Reset()
		if mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, err
		}
	}
	opts := metav1.ApplyOptions{FieldManager: "reflector-deploy-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace()).Apply(ctx, obj.GetName(), obj, opts)
	}
	return a.dynamic.Resource(mapping.Resource).Apply(ctx, obj.GetName(), obj, opts)
}

// ensureNamespace creates reflector's namespace for real: a dry-run of the Namespace does not
// create it, and every namespaced object needs it.
func ensureNamespace(t testing.TB, env *testenv.Env) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace}}}
	_, err := env.Dynamic().Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).
		Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func key(obj *unstructured.Unstructured) string {
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// knativeCheck says which check of knative/ runs: this package's dry runs against Knative's
// CRDs always, TestKnativeIntegration with Knative's own control planes when they are built.
func knativeCheck() string {
	_, _, serr := testenv.KnativeBinDir("serving")
	_, _, eerr := testenv.KnativeBinDir("eventing")
	if err := errors.Join(serr, eerr); err != nil {
		return "server-side dry run against Knative's CRDs only, without Knative's webhooks; " +
			"TestKnativeIntegration is skipped: " + err.Error()
	}
	return "server-side dry run against Knative's CRDs; TestKnativeIntegration checks knative/ " +
		"with Knative's own webhooks and controllers too"
}

// TestManifestsDryRunIntegration applies everything `kubectl apply -k knative/` would apply, by
// server-side dry-run, to an apiserver that serves reflector's and Knative's CRDs.
func TestManifestsDryRunIntegration(t *testing.T) {
	env := testenv.Kube(t)
	t.Log(knativeCheck())
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	ctx := context.Background()

	objs := build(t, placeholderImages())
	a := newApplier(env)
	seen := map[string]bool{}
	for _, obj := range objs {
		k := key(obj)
		seen[k] = true
		if _, err := a.apply(ctx, obj, true); err != nil {
			t.Errorf("%s rejected: %v", k, err)
		}
	}

	// What the issue asks knative/ to contain, so that a file dropped from the kustomization
	// does not pass unnoticed.
	for _, want := range []string{
		"Namespace /" + namespace,
		"ServiceAccount reflector-system/reflector-webhook",
		"ServiceAccount reflector-system/reflector-scan",
		"ServiceAccount reflector-system/reflector-policy",
		"ServiceAccount reflector-system/reflector-cron",
		"ServiceAccount reflector-system/reflector-source",
		"ClusterRole /reflector-webhook",
		"ClusterRoleBinding /reflector-webhook",
		"ClusterRole /reflector-scan",
		"ClusterRoleBinding /reflector-scan",
		"PersistentVolumeClaim reflector-system/reflector-store",
		"Deployment reflector-system/reflector-store",
		"Service reflector-system/reflector-webhook",
		"Service reflector-system/reflector-scan",
		"Service reflector-system/reflector-policy",
		"CronJob reflector-system/reflector-cron",
		"Broker reflector-system/default",
		"ApiServerSource reflector-system/reflector-objects",
		"SinkBinding reflector-system/reflector-webhook",
		"SinkBinding reflector-system/reflector-scan",
		"SinkBinding reflector-system/reflector-policy",
		"SinkBinding reflector-system/reflector-cron",
		"Trigger reflector-system/reflector-tags-changed",
	} {
		if !seen[want] {
			t.Errorf("kustomize build knative/ has no %s", want)
		}
	}

	// The CRDs live in config/crd: `kubectl delete -k knative/` must not delete them, and every
	// ImageRepository and ImagePolicy with them.
	for _, obj := range objs {
		if obj.GetKind() == "CustomResourceDefinition" {
			t.Errorf("kustomize build knative/ has %s: its deletion would delete every object of the kind", key(obj))
		}
	}

	// The images transformer must reach every ko:// reference, or the cluster gets an image
	// name it cannot pull.
	for _, obj := range objs {
		b, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "ko://") {
			t.Errorf("%s still names a ko:// image after the images overlay", key(obj))
		}
	}
}

// TestTriggersRouteEveryEventIntegration checks the routing table: each event type reflector
// consumes reaches the function that handles it, through a Trigger the apiserver accepts.
func TestTriggersRouteEveryEventIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	// typ is an exact type, or "prefix:" and a type prefix (the filters of Knative's newer
	// filter language, for type families such as CDEvents').
	type route struct{ typ, kind, subscriber string }
	want := map[route]bool{
		{"io.imagereflector.scan.requested.v1", "", "reflector-scan"}: true,
		// The ApiServerSource's ImageRepository events reach the public surface's /broker: the
		// pod that wrote the annotation and the status of a push is running when their events
		// come (docs/topology.md).
		{"dev.knative.apiserver.resource.add", "ImageRepository", "reflector-webhook/broker"}:    true,
		{"dev.knative.apiserver.resource.update", "ImageRepository", "reflector-webhook/broker"}: true,
		{"dev.knative.apiserver.resource.delete", "ImageRepository", "reflector-webhook/broker"}: true,
		{"io.imagereflector.tags.changed.v1", "", "reflector-policy"}:                            true,
		{"io.imagereflector.policy.requested.v1", "", "reflector-policy"}:                        true,
		{"dev.knative.apiserver.resource.add", "ImagePolicy", "reflector-policy"}:                true,
		{"dev.knative.apiserver.resource.update", "ImagePolicy", "reflector-policy"}:             true,
		// Registry pushes sent to the Broker as CloudEvents (docs/webhooks.md).
		{webhook.EventGridImagePushed, "", "reflector-scan"}:                  true,
		{webhook.EventarcMessagePublished, "", "reflector-scan"}:              true,
		{"prefix:" + webhook.CDEventsArtifactPublished, "", "reflector-scan"}: true,
	}
	a := newApplier(env)
	got := map[route]bool{}
	for _, obj := range build(t, placeholderImages()) {
		if obj.GetKind() != "Trigger" {
			continue
		}
		// The apiserver's answer, not our input: fields its schema prunes would vanish here.
		applied, err := a.apply(context.Background(), obj, true)
		if err != nil {
			t.Fatalf("Trigger %s rejected: %v", obj.GetName(), err)
		}
		attrs, _, _ := unstructured.NestedStringMap(applied.Object, "spec", "filter", "attributes")
		if attrs == nil {
			attrs = map[string]string{}
		}
		filters, _, _ := unstructured.NestedSlice(applied.Object, "spec", "filters")
		for _, f := range filters {
			fm, _ := f.(map[string]any)
			if len(fm) != 1 {
				t.Fatalf("Trigger %s: a filter with other than one dialect: %v", obj.GetName(), fm)
			}
			for dialect, v := range fm {
				m, _ := v.(map[string]any)
				for k, val := range m {
					s, _ := val.(string)
					switch dialect {
					case "exact":
						attrs[k] = s
					case "prefix":
						attrs[k] = "prefix:" + s
					default:
						t.Fatalf("Trigger %s: filter dialect %s is none this test reads", obj.GetName(), dialect)
					}
				}
			}
		}
		sub, _, _ := unstructured.NestedString(applied.Object, "spec", "subscriber", "ref", "name")
		// A relative uri is a path of the ref's address.
		uri, _, _ := unstructured.NestedString(applied.Object, "spec", "subscriber", "uri")
		sub += uri
		broker, _, _ := unstructured.NestedString(applied.Object, "spec", "broker")
		if broker != "default" {
			t.Errorf("Trigger %s subscribes to broker %q", obj.GetName(), broker)
		}
		got[route{attrs["type"], attrs["kind"], sub}] = true
	}
	for r := range want {
		if !got[r] {
			t.Errorf("no Trigger routes type %q kind %q to %s", r.typ, r.kind, r.subscriber)
		}
	}
	for r := range got {
		if !want[r] {
			t.Errorf("unexpected route: type %q kind %q to %s", r.typ, r.kind, r.subscriber)
		}
	}
}

// TestClusterWebhookComponentIntegration applies knative/ with the cluster-webhook component,
// which turns on the scan function's cluster receiver, by server-side dry-run.
func TestClusterWebhookComponentIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	a := newApplier(env)
	found := false
	for _, obj := range build(t, placeholderImages()+"components:\n  - {{knative}}/cluster-webhook\n") {
		if obj.GetKind() != "Service" || obj.GetName() != "reflector-webhook" {
			continue
		}
		found = true
		applied, err := a.apply(context.Background(), obj, true)
		if err != nil {
			t.Fatalf("reflector-webhook with the cluster-webhook component rejected: %v", err)
		}
		containers, _, _ := unstructured.NestedSlice(applied.Object, "spec", "template", "spec", "containers")
		c, _ := containers[0].(map[string]any)
		envs, _ := c["env"].([]any)
		var file string
		for _, e := range envs {
			if m, _ := e.(map[string]any); m["name"] == "REFLECTOR_CLUSTER_SECRET_FILE" {
				file, _ = m["value"].(string)
			}
		}
		mounts, _ := c["volumeMounts"].([]any)
		mounted := false
		for _, m := range mounts {
			mm, _ := m.(map[string]any)
			if p, _ := mm["mountPath"].(string); p != "" && file != "" && strings.HasPrefix(file, p+"/") {
				mounted = mm["name"] == "cluster-webhook"
			}
		}
		if !mounted {
			t.Errorf("REFLECTOR_CLUSTER_SECRET_FILE %q is not in the cluster-webhook Secret's mount", file)
		}
		volumes, _, _ := unstructured.NestedSlice(applied.Object, "spec", "template", "spec", "volumes")
		for _, v := range volumes {
			vm, _ := v.(map[string]any)
			if vm["name"] != "cluster-webhook" {
				continue
			}
			if optional, _, _ := unstructured.NestedBool(vm, "secret", "optional"); optional {
				t.Error("with the component the cluster-webhook Secret must be required, so a missing one is reported")
			}
			if name, _, _ := unstructured.NestedString(vm, "secret", "secretName"); name != "reflector-cluster-webhook" {
				t.Errorf("cluster-webhook volume mounts Secret %q", name)
			}
		}
	}
	if !found {
		t.Fatal("no reflector-webhook Service in the build")
	}
}

// containerEnv returns the environment of a Knative Service's first container.
func containerEnv(svc *unstructured.Unstructured) map[string]string {
	containers, _, _ := unstructured.NestedSlice(svc.Object, "spec", "template", "spec", "containers")
	out := map[string]string{}
	if len(containers) == 0 {
		return out
	}
	c, _ := containers[0].(map[string]any)
	envs, _ := c["env"].([]any)
	for _, e := range envs {
		if m, _ := e.(map[string]any); m != nil {
			name, _ := m["name"].(string)
			value, _ := m["value"].(string)
			out[name] = value
		}
	}
	return out
}

// TestPublicSurfaceIntegration checks what the internet can reach once knative/ is applied:
// only reflector-webhook, which serves the webhook surface as a ServiceAccount of its own; the
// other Services the broker delivers to are cluster-local, and a Trigger delivers to the public
// one only at /broker, with a token for its audience (the function proves it there,
// TestSenderProofIntegration).
func TestPublicSurfaceIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	a := newApplier(env)
	// Each runs as a ServiceAccount of its own: the public one's holds only what its path needs.
	want := map[string]struct{ visibility, surface, serviceAccount string }{
		"reflector-webhook": {"", "webhooks", "reflector-webhook"},
		"reflector-scan":    {"cluster-local", "cloudevents", "reflector-scan"},
		"reflector-policy":  {"cluster-local", "", "reflector-policy"},
	}
	seen := map[string]bool{}
	for _, obj := range build(t, placeholderImages()) {
		switch obj.GetKind() {
		case "Service":
			w, ok := want[obj.GetName()]
			if !ok || obj.GetAPIVersion() != "serving.knative.dev/v1" {
				continue
			}
			seen[obj.GetName()] = true
			applied, err := a.apply(context.Background(), obj, true)
			if err != nil {
				t.Fatalf("%s rejected: %v", obj.GetName(), err)
			}
			if got := applied.GetLabels()["networking.knative.dev/visibility"]; got != w.visibility {
				t.Errorf("%s: visibility %q, want %q", obj.GetName(), got, w.visibility)
			}
			if got := containerEnv(applied)["REFLECTOR_SURFACE"]; got != w.surface {
				t.Errorf("%s: REFLECTOR_SURFACE %q, want %q", obj.GetName(), got, w.surface)
			}
			if got, _, _ := unstructured.NestedString(applied.Object, "spec", "template", "spec", "serviceAccountName"); got != w.serviceAccount {
				t.Errorf("%s: serviceAccountName %q, want %q", obj.GetName(), got, w.serviceAccount)
			}
		case "Trigger":
			sub, _, _ := unstructured.NestedString(obj.Object, "spec", "subscriber", "ref", "name")
			uri, _, _ := unstructured.NestedString(obj.Object, "spec", "subscriber", "uri")
			aud, _, _ := unstructured.NestedString(obj.Object, "spec", "subscriber", "audience")
			if sub == "reflector-webhook" && (uri != "/broker" || aud != "reflector-webhook") {
				t.Errorf("Trigger %s delivers to the public reflector-webhook at %q with audience %q, want /broker and reflector-webhook", obj.GetName(), uri, aud)
			}
			if sub != "reflector-webhook" && uri != "" {
				t.Errorf("Trigger %s delivers to %s at %q: the cluster-local functions serve their events at /", obj.GetName(), sub, uri)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no Knative Service %s in the build", name)
		}
	}
}

// TestSenderProofIntegration applies knative/ as it is: each function that a Trigger delivers
// to requires, by default, the audience that those Triggers request tokens for; for the public
// reflector-webhook that is its /broker alone (registries prove themselves with their receiver's
// Secret on /hook/..., functions/scan's tests).
func TestSenderProofIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	a := newApplier(env)
	audiences := map[string]map[string]bool{} // subscriber -> audiences its Triggers ask for
	required := map[string]string{}
	for _, obj := range build(t, placeholderImages()) {
		applied, err := a.apply(context.Background(), obj, true)
		if err != nil {
			t.Fatalf("%s rejected: %v", key(obj), err)
		}
		switch obj.GetKind() {
		case "Trigger":
			sub, _, _ := unstructured.NestedString(applied.Object, "spec", "subscriber", "ref", "name")
			aud, _, _ := unstructured.NestedString(applied.Object, "spec", "subscriber", "audience")
			if audiences[sub] == nil {
				audiences[sub] = map[string]bool{}
			}
			audiences[sub][aud] = true
		case "Service":
			if obj.GetAPIVersion() != "serving.knative.dev/v1" {
				continue
			}
			e := containerEnv(applied)
			required[obj.GetName()] = e["REFLECTOR_OIDC_AUDIENCE"]
			if aud := e["REFLECTOR_OIDC_AUDIENCE"]; aud != "" && e["REFLECTOR_OIDC_NAMESPACES"] != namespace {
				t.Errorf("%s: REFLECTOR_OIDC_NAMESPACES %q, want %q", obj.GetName(), e["REFLECTOR_OIDC_NAMESPACES"], namespace)
			}
		}
	}
	for _, svc := range []string{"reflector-webhook", "reflector-scan", "reflector-policy"} {
		if required[svc] == "" {
			t.Errorf("%s requires no OIDC audience", svc)
		}
		if len(audiences[svc]) != 1 || !audiences[svc][required[svc]] {
			t.Errorf("Triggers to %s ask for audiences %v, the function requires %q", svc, audiences[svc], required[svc])
		}
	}
	// Each function its own audience: a token one accepts is refused by the others.
	if len(map[string]bool{required["reflector-webhook"]: true, required["reflector-scan"]: true, required["reflector-policy"]: true}) != 3 {
		t.Errorf("the functions share an audience: %v", required)
	}
}

// TestFluxNotificationsComponentIntegration applies knative/ with the flux-notifications
// component: every function that records Events posts them to notification-controller's
// in-cluster address; without the component none does.
func TestFluxNotificationsComponentIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	a := newApplier(env)
	const want = "http://notification-controller.flux-system.svc.cluster.local./"
	addrs := func(overlay string) map[string]string {
		got := map[string]string{}
		for _, obj := range build(t, overlay) {
			applied, err := a.apply(context.Background(), obj, true)
			if err != nil {
				t.Fatalf("%s rejected: %v", key(obj), err)
			}
			if obj.GetKind() == "Service" && obj.GetAPIVersion() == "serving.knative.dev/v1" {
				got[obj.GetName()] = containerEnv(applied)["REFLECTOR_EVENTS_ADDR"]
			}
		}
		return got
	}
	with := addrs(placeholderImages() + "components:\n  - {{knative}}/flux-notifications\n")
	without := addrs(placeholderImages())
	for _, svc := range []string{"reflector-webhook", "reflector-scan", "reflector-policy"} {
		if with[svc] != want {
			t.Errorf("%s with the component: REFLECTOR_EVENTS_ADDR %q, want %q", svc, with[svc], want)
		}
		if without[svc] != "" {
			t.Errorf("%s without the component: REFLECTOR_EVENTS_ADDR %q", svc, without[svc])
		}
	}
}

// TestObjectLevelIdentityComponentIntegration applies knative/ with the object-level-identity
// component: every function that logs in to registries has the feature gate on; without the
// component none has.
func TestObjectLevelIdentityComponentIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	a := newApplier(env)
	const want = "ObjectLevelWorkloadIdentity=true"
	gates := func(overlay string) map[string]string {
		got := map[string]string{}
		for _, obj := range build(t, overlay) {
			applied, err := a.apply(context.Background(), obj, true)
			if err != nil {
				t.Fatalf("%s rejected: %v", key(obj), err)
			}
			if obj.GetKind() == "Service" && obj.GetAPIVersion() == "serving.knative.dev/v1" {
				got[obj.GetName()] = containerEnv(applied)["REFLECTOR_FEATURE_GATES"]
			}
		}
		return got
	}
	with := gates(placeholderImages() + "components:\n  - {{knative}}/object-level-identity\n")
	without := gates(placeholderImages())
	for _, svc := range []string{"reflector-webhook", "reflector-scan", "reflector-policy"} {
		if with[svc] != want {
			t.Errorf("%s with the component: REFLECTOR_FEATURE_GATES %q, want %q", svc, with[svc], want)
		}
		if without[svc] != "" {
			t.Errorf("%s without the component: REFLECTOR_FEATURE_GATES %q", svc, without[svc])
		}
	}
}

// TestStoreIsSharedIntegration: every workload that touches the tag store (the functions'
// Services and the cron reconciler's Jobs) mounts the one ReadWriteOnce claim where its
// REFLECTOR_STORE_DIR points, and keeps to the node of a pod with the store's label, which the
// store's anchor (a Deployment that mounts the claim and never scales to zero) always is.
func TestStoreIsSharedIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	a := newApplier(env)
	podSpecs := map[string][]string{
		"Service/reflector-webhook": {"spec", "template"},
		"Service/reflector-scan":    {"spec", "template"},
		"Service/reflector-policy":  {"spec", "template"},
		"CronJob/reflector-cron":    {"spec", "jobTemplate", "spec", "template"},
	}
	seen := 0
	anchored := false
	// The first pod to mount the volume sets its group, and the kubelet leaves a mounted volume
	// as it is: every pod of the store, the anchor included, has the same fsGroup.
	groups := map[string]string{}
	for _, obj := range build(t, placeholderImages()) {
		if path, ok := podSpecs[obj.GetKind()+"/"+obj.GetName()]; ok {
			g, _, _ := unstructured.NestedFieldNoCopy(obj.Object, append(path, "spec", "securityContext", "fsGroup")...)
			groups[key(obj)] = fmt.Sprint(g)
		}
		if obj.GetKind() == "Deployment" && obj.GetName() == "reflector-store" {
			g, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "template", "spec", "securityContext", "fsGroup")
			groups[key(obj)] = fmt.Sprint(g)
			anchored = true
			if _, err := a.apply(context.Background(), obj, true); err != nil {
				t.Fatalf("%s rejected: %v", key(obj), err)
			}
			replicas, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas")
			labels, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels")
			volumes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "volumes")
			claim := ""
			if len(volumes) == 1 {
				vm, _ := volumes[0].(map[string]any)
				claim, _, _ = unstructured.NestedString(vm, "persistentVolumeClaim", "claimName")
			}
			if fmt.Sprint(replicas) != "1" || labels["reflector.imagereflector.io/store"] != "reflector-store" || claim != "reflector-store" {
				t.Errorf("the store's anchor: %v replicas, labels %v, claim %q; want one pod with the store's label that mounts reflector-store", replicas, labels, claim)
			}
			continue
		}
		path, ok := podSpecs[obj.GetKind()+"/"+obj.GetName()]
		if !ok {
			continue
		}
		seen++
		applied, err := a.apply(context.Background(), obj, true)
		if err != nil {
			t.Fatalf("%s rejected: %v", key(obj), err)
		}
		labels, _, _ := unstructured.NestedStringMap(applied.Object, append(path, "metadata", "labels")...)
		if labels["reflector.imagereflector.io/store"] != "reflector-store" {
			t.Errorf("%s: pods lack the store label: %v", key(obj), labels)
		}
		spec := append(path, "spec")
		terms, _, _ := unstructured.NestedSlice(applied.Object, append(spec, "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution")...)
		if len(terms) != 1 {
			t.Errorf("%s: %d required pod affinity terms, want the store's", key(obj), len(terms))
		} else {
			term, _ := terms[0].(map[string]any)
			sel, _, _ := unstructured.NestedStringMap(term, "labelSelector", "matchLabels")
			if sel["reflector.imagereflector.io/store"] != "reflector-store" || term["topologyKey"] != "kubernetes.io/hostname" {
				t.Errorf("%s: pod affinity %v, want the node of a pod with the store's label", key(obj), term)
			}
		}
		volumes, _, _ := unstructured.NestedSlice(applied.Object, append(spec, "volumes")...)
		claimVolume := ""
		for _, v := range volumes {
			vm, _ := v.(map[string]any)
			if claim, _, _ := unstructured.NestedString(vm, "persistentVolumeClaim", "claimName"); claim == "reflector-store" {
				claimVolume, _ = vm["name"].(string)
			}
		}
		containers, _, _ := unstructured.NestedSlice(applied.Object, append(spec, "containers")...)
		c, _ := containers[0].(map[string]any)
		dir := ""
		envs, _ := c["env"].([]any)
		for _, e := range envs {
			if m, _ := e.(map[string]any); m["name"] == "REFLECTOR_STORE_DIR" {
				dir, _ = m["value"].(string)
			}
		}
		mounted := false
		mounts, _ := c["volumeMounts"].([]any)
		for _, m := range mounts {
			mm, _ := m.(map[string]any)
			mounted = mounted || (mm["name"] == claimVolume && mm["mountPath"] == dir && dir != "")
		}
		if claimVolume == "" || !mounted {
			t.Errorf("%s: REFLECTOR_STORE_DIR %q is not the mount of claim reflector-store", key(obj), dir)
		}
	}
	if seen != len(podSpecs) {
		t.Errorf("found %d of the %d workloads", seen, len(podSpecs))
	}
	if !anchored {
		t.Error("knative/ has no Deployment reflector-store, the store's anchor")
	}
	for _, g := range groups {
		if g == "<nil>" || g != groups["Deployment reflector-system/reflector-store"] {
			t.Errorf("the store's pods have fsGroups %v; want one, set on each", groups)
			break
		}
	}
}

// TestMultiTenancyComponentIntegration applies knative/ with the multi-tenancy component: the
// policy function refuses cross-namespace references and the three functions log in as the
// namespace's default ServiceAccount, with the object-level identity gate its token grant and the admission policy
// that it brings along.
func TestMultiTenancyComponentIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installKnativeCRDs(t, env)
	ensureNamespace(t, env)
	a := newApplier(env)
	kinds := map[string]bool{}
	envs := map[string]map[string]string{}
	for _, obj := range build(t, placeholderImages()+"components:\n  - {{knative}}/multi-tenancy\n") {
		kinds[obj.GetKind()+"/"+obj.GetName()] = true
		if obj.GetKind() != "Service" || obj.GetAPIVersion() != "serving.knative.dev/v1" {
			continue
		}
		applied, err := a.apply(context.Background(), obj, true)
		if err != nil {
			t.Fatalf("%s rejected: %v", key(obj), err)
		}
		envs[obj.GetName()] = containerEnv(applied)
	}
	for _, svc := range []string{"reflector-webhook", "reflector-scan", "reflector-policy"} {
		want := map[string]string{
			"REFLECTOR_DEFAULT_SERVICE_ACCOUNT": "default",
			"REFLECTOR_FEATURE_GATES":           "ObjectLevelWorkloadIdentity=true",
		}
		if svc == "reflector-policy" {
			want["REFLECTOR_NO_CROSS_NAMESPACE_REFS"] = "true"
		}
		for k, v := range want {
			if got := envs[svc][k]; got != v {
				t.Errorf("%s: %s %q, want %q", svc, k, got, v)
			}
		}
	}
	for _, want := range []string{"ValidatingAdmissionPolicy/reflector-writes", "ValidatingAdmissionPolicyBinding/reflector-writes", "ClusterRole/reflector-serviceaccount-tokens"} {
		if !kinds[want] {
			t.Errorf("the component brings no %s", want)
		}
	}
}

// crdAnnotations are what config/crd sets on the CRDs, so that once installed no Flux
// Kustomization applies over them or prunes them (kustomize-controller honours both on the
// object in the cluster), and no Helm release deletes them.
var crdAnnotations = map[string]string{
	"kustomize.toolkit.fluxcd.io/ssa":   "Ignore",
	"kustomize.toolkit.fluxcd.io/prune": "disabled",
	"helm.sh/resource-policy":           "keep",
}

// buildDir runs kustomize on a directory of the repository.
func buildDir(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(t), dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestCRDKustomization checks config/crd, what `kubectl apply -k config/crd` and a release's
// crds.yaml install: the two CRDs, each with the annotations that keep Flux and Helm from
// taking them over or deleting them.
func TestCRDKustomization(t *testing.T) {
	got := map[string]bool{}
	for _, obj := range buildDir(t, "config/crd") {
		got[key(obj)] = true
		if obj.GetKind() != "CustomResourceDefinition" {
			continue
		}
		for k, v := range crdAnnotations {
			if a := obj.GetAnnotations()[k]; a != v {
				t.Errorf("%s: annotation %s is %q, want %q", key(obj), k, a, v)
			}
		}
	}
	want := map[string]bool{
		"CustomResourceDefinition /imagerepositories.image.toolkit.fluxcd.io": true,
		"CustomResourceDefinition /imagepolicies.image.toolkit.fluxcd.io":     true,
	}
	for k := range want {
		if !got[k] {
			t.Errorf("kustomize build config/crd has no %s", k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("kustomize build config/crd has %s besides the CRDs", k)
		}
	}
}
