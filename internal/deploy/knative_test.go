package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/imagereflector/reflector/internal/testenv"
)

// digestImages is an overlay that maps the ko:// references to images by digest, as `make
// images` does: Serving resolves tags to digests from the registry, which it must not try here.
func digestImages() string {
	var b strings.Builder
	b.WriteString("images:\n")
	cmds := make([]string, 0, len(koImages))
	for cmd := range koImages {
		cmds = append(cmds, cmd)
	}
	sort.Strings(cmds)
	for i, cmd := range cmds {
		fmt.Fprintf(&b, "  - name: %s\n    newName: registry.example.com/reflector/%s\n    digest: sha256:%064x\n", koImages[cmd], cmd, i+1)
	}
	return b.String()
}

// documentedFeatures returns the Serving feature flags that docs/install.md tells the cluster
// admin to set, from its `kubectl patch configmap config-features -n knative-serving` command.
func documentedFeatures(t testing.TB) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?s)kubectl patch configmap config-features -n knative-serving --type merge -p '([^']*)'`)
	m := re.FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/install.md has no `kubectl patch configmap config-features -n knative-serving` command")
	}
	var patch struct{ Data map[string]string }
	if err := json.Unmarshal(m[1], &patch); err != nil || len(patch.Data) == 0 {
		t.Fatalf("docs/install.md: the config-features patch is not a JSON merge patch of data: %v\n%s", err, m[1])
	}
	return patch.Data
}

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	revisions  = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "revisions"}
	configs    = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "configurations"}
	routes     = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "routes"}
	pas        = schema.GroupVersionResource{Group: "autoscaling.internal.knative.dev", Version: "v1alpha1", Resource: "podautoscalers"}
	deploys    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	jobs       = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	brokers    = schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "brokers"}
	bindings   = schema.GroupVersionResource{Group: "sources.knative.dev", Version: "v1", Resource: "sinkbindings"}
	apiSources = schema.GroupVersionResource{Group: "sources.knative.dev", Version: "v1", Resource: "apiserversources"}
)

// patchFeatures merge-patches Serving's config-features, through Knative's ConfigMap
// validation webhook.
func patchFeatures(t testing.TB, env *testenv.Env, data map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic().Resource(configMaps).Namespace("knative-serving").
		Patch(context.Background(), "config-features", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching config-features with %s: %v", b, err)
	}
}

// TestKnativeIntegration applies knative/ as a user does, to an apiserver where Knative Serving's
// and Eventing's own webhooks and controllers run, after only what docs/install.md says the
// cluster needs first. Nothing runs pods here, so Routes and Services never become Ready, and the
// Broker's class controller (with its data plane) is not there: the test publishes the address it
// would give the Broker.
func TestKnativeIntegration(t *testing.T) {
	start := time.Now()
	env, kn := testenv.KnativeEnv(t, testenv.KnativeOptions{Serving: true, Eventing: true, EventingController: true})
	t.Logf("Knative Serving %s and Eventing %s run against the test apiserver (started in %s): their admission webhooks and controllers check knative/",
		kn.ServingVersion, kn.EventingVersion, time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	dyn := env.Dynamic()

	features := documentedFeatures(t)
	patchFeatures(t, env, features)

	objs := build(t, digestImages())
	a := newApplier(env)
	waited := false
	for _, obj := range objs {
		if !waited && obj.GetKind() == "Service" && obj.GetAPIVersion() == "serving.knative.dev/v1" {
			// Knative's webhook reads config-features through a watch: the first Service may
			// still meet the defaults, so it is tried until the flags have reached the webhook.
			waited = true
			testenv.Eventually(t, 30*time.Second, func() error {
				if _, err := a.apply(ctx, obj, true); err != nil {
					return fmt.Errorf("with the feature flags docs/install.md lists (%v), %s is refused: %w", features, key(obj), err)
				}
				return nil
			})
		}
		if _, err := a.apply(ctx, obj, false); err != nil {
			t.Errorf("%s refused: %v", key(obj), err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The Broker's address, as the channel-based broker's controller publishes it.
	sink := "http://broker-ingress.knative-eventing.svc.cluster.local/" + namespace + "/default"
	testenv.Eventually(t, 30*time.Second, func() error {
		b, err := dyn.Resource(brokers).Namespace(namespace).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if class := b.GetAnnotations()["eventing.knative.dev/broker.class"]; class == "" {
			t.Fatal("Eventing's defaulting webhook gave the Broker no class")
		}
		if err := unstructured.SetNestedField(b.Object, map[string]any{"url": sink}, "status", "address"); err != nil {
			return err
		}
		_, err = dyn.Resource(brokers).Namespace(namespace).UpdateStatus(ctx, b, metav1.UpdateOptions{})
		return err
	})

	t.Run("SinkBindings", func(t *testing.T) {
		for _, name := range []string{"reflector-webhook", "reflector-scan", "reflector-policy", "reflector-cron"} {
			testenv.Eventually(t, 60*time.Second, func() error {
				b, err := dyn.Resource(bindings).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if got, _, _ := unstructured.NestedString(b.Object, "status", "sinkUri"); got != sink {
					return fmt.Errorf("SinkBinding %s: sinkUri %q, want %q; conditions %v", name, got, sink, conditions(b))
				}
				return nil
			})
		}
	})

	ksvcByName := map[string]*unstructured.Unstructured{}
	var cron *unstructured.Unstructured
	for _, obj := range objs {
		switch {
		case obj.GetKind() == "Service" && obj.GetAPIVersion() == "serving.knative.dev/v1":
			ksvcByName[obj.GetName()] = obj
		case obj.GetKind() == "CronJob":
			cron = obj
		}
	}
	visibility := map[string]string{"reflector-webhook": "", "reflector-scan": "cluster-local", "reflector-policy": "cluster-local"}
	for name, want := range ksvcByName {
		t.Run("Service/"+name, func(t *testing.T) {
			checkService(t, env, want, sink, visibility[name])
		})
	}

	t.Run("CronJob", func(t *testing.T) {
		// kube-controller-manager does not run here: create the Job as its CronJob controller
		// would, from the template, and let the SinkBinding webhook mutate it.
		jt, _, _ := unstructured.NestedMap(cron.Object, "spec", "jobTemplate")
		job := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "batch/v1", "kind": "Job",
			"metadata": map[string]any{"name": "reflector-cron-manual", "namespace": namespace},
			"spec":     jt["spec"],
		}}
		labels, _, _ := unstructured.NestedStringMap(jt, "metadata", "labels")
		job.SetLabels(labels)
		created, err := dyn.Resource(jobs).Namespace(namespace).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a Job from the CronJob's template: %v", err)
		}
		containers, _, _ := unstructured.NestedSlice(created.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		if got := envOf(c)["K_SINK"]; got != sink {
			t.Errorf("the cron Job's container has K_SINK %q, want %q", got, sink)
		}
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		if !strings.Contains(strings.Join(args, " "), "$(K_SINK)") {
			t.Errorf("the cron reconciler's args %q do not read $(K_SINK)", args)
		}
	})

	t.Run("ApiServerSource", func(t *testing.T) {
		// Eventing's controller checks that the source's ServiceAccount may get, list and watch
		// what it names: knative/rbac-source.yaml.
		testenv.Eventually(t, 60*time.Second, func() error {
			s, err := dyn.Resource(apiSources).Namespace(namespace).Get(ctx, "reflector-objects", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := conditions(s)["SufficientPermissions"]; c != "True" {
				return fmt.Errorf("SufficientPermissions %q; conditions %v", c, conditions(s))
			}
			return nil
		})
	})

	// Each documented flag is needed: with it off, Serving's webhook refuses the Service.
	t.Run("FeatureFlags", func(t *testing.T) {
		svc := ksvcByName["reflector-scan"]
		flags := make([]string, 0, len(features))
		for f := range features {
			flags = append(flags, f)
		}
		sort.Strings(flags)
		for _, flag := range flags {
			patchFeatures(t, env, map[string]string{flag: "disabled"})
			var refusal error
			testenv.Eventually(t, 30*time.Second, func() error {
				_, refusal = a.apply(ctx, svc, true)
				if refusal == nil {
					return fmt.Errorf("with %s disabled, reflector-scan is admitted", flag)
				}
				return nil
			})
			patchFeatures(t, env, map[string]string{flag: features[flag]})
			msg := refusal.Error()
			if !strings.Contains(msg, `admission webhook "validation.webhook.serving.knative.dev" denied the request`) {
				t.Errorf("with %s disabled: refused, but not by Serving's validating webhook: %v", flag, refusal)
			}
			if what, ok := gatedBy[flag]; ok && !strings.Contains(msg, what) {
				t.Errorf("with %s disabled: Knative's refusal does not name %q: %v", flag, what, refusal)
			}
			t.Logf("with %s disabled: %v", flag, refusal)
		}
		// Back to what the document says, the Service is admitted again.
		testenv.Eventually(t, 30*time.Second, func() error {
			_, err := a.apply(ctx, svc, true)
			return err
		})
	})
	t.Run("every server listens on loopback only", func(t *testing.T) {
		exposed, err := env.ExposedListeners()
		if err != nil {
			t.Fatal(err)
		}
		for proc, addrs := range exposed {
			t.Errorf("%s listens on %v, outside 127.0.0.1", proc, addrs)
		}
	})
	t.Logf("TestKnativeIntegration took %s", time.Since(start).Round(time.Millisecond))
}

// gatedBy is what Knative's refusal names when one of the documented feature flags is off.
var gatedBy = map[string]string{
	"kubernetes.podspec-affinity":                "must not set the field(s): spec.template.spec.affinity",
	"kubernetes.podspec-persistent-volume-claim": "Persistent volume claim support is disabled",
	"kubernetes.podspec-persistent-volume-write": "Persistent volume write support is disabled",
	"kubernetes.podspec-securitycontext":         "spec.template.spec.securityContext.fsGroup",
}

// checkService checks what Serving made of one of knative/'s Services: a Configuration, a
// Revision with K_SINK from its SinkBinding, the Revision's Deployment with everything the
// manifest asks of the pod, a PodAutoscaler, and a Route with the manifest's visibility.
func checkService(t *testing.T, env *testenv.Env, manifest *unstructured.Unstructured, sink, visibility string) {
	ctx := context.Background()
	dyn := env.Dynamic()
	name := manifest.GetName()
	var dep *unstructured.Unstructured
	testenv.Eventually(t, 90*time.Second, func() error {
		if _, err := dyn.Resource(configs).Namespace(namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		revs, err := dyn.Resource(revisions).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + name})
		if err != nil {
			return err
		}
		var withSink []string
		for _, r := range revs.Items {
			containers, _, _ := unstructured.NestedSlice(r.Object, "spec", "containers")
			if len(containers) > 0 && envOf(containers[0].(map[string]any))["K_SINK"] == sink {
				withSink = append(withSink, r.GetName())
			}
		}
		if len(withSink) == 0 {
			return fmt.Errorf("%d Revisions of %s, none with K_SINK %q", len(revs.Items), name, sink)
		}
		deps, err := dyn.Resource(deploys).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/revision=" + withSink[0]})
		if err != nil {
			return err
		}
		if len(deps.Items) != 1 {
			return fmt.Errorf("%d Deployments of Revision %s", len(deps.Items), withSink[0])
		}
		if _, err := dyn.Resource(pas).Namespace(namespace).Get(ctx, withSink[0], metav1.GetOptions{}); err != nil {
			return fmt.Errorf("PodAutoscaler of %s: %w", withSink[0], err)
		}
		dep = &deps.Items[0]
		return nil
	})
	t.Logf("Configuration %s, Revision and PodAutoscaler %s, Deployment %s", name,
		dep.GetLabels()["serving.knative.dev/revision"], dep.GetName())

	want, _, _ := unstructured.NestedMap(manifest.Object, "spec", "template", "spec")
	got, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
	for _, field := range []string{"securityContext", "affinity", "volumes", "serviceAccountName"} {
		if err := contains(got[field], want[field]); err != nil {
			t.Errorf("Deployment %s: pod %s: %v", dep.GetName(), field, err)
		}
	}
	wantC := want["containers"].([]any)[0].(map[string]any)
	var gotC map[string]any
	var queue map[string]any
	for _, c := range got["containers"].([]any) {
		cm := c.(map[string]any)
		switch cm["name"] {
		case wantC["name"]:
			gotC = cm
		case "queue-proxy":
			queue = cm
		}
	}
	if gotC == nil {
		t.Fatalf("Deployment %s has no container %v", dep.GetName(), wantC["name"])
	}
	for _, field := range []string{"image", "ports", "volumeMounts", "securityContext", "resources"} {
		if err := contains(gotC[field], wantC[field]); err != nil {
			t.Errorf("Deployment %s: container %v: %s: %v", dep.GetName(), wantC["name"], field, err)
		}
	}
	gotEnv := envOf(gotC)
	for k, v := range envOf(wantC) {
		if gotEnv[k] != v {
			t.Errorf("Deployment %s: %s=%q, the manifest says %q", dep.GetName(), k, gotEnv[k], v)
		}
	}
	if gotEnv["K_SINK"] != sink {
		t.Errorf("Deployment %s: K_SINK %q, want the Broker's %q", dep.GetName(), gotEnv["K_SINK"], sink)
	}
	// Serving moves the user container's readiness probe into its queue-proxy sidecar, which
	// probes the container on the manifest's path.
	path, _, _ := unstructured.NestedString(wantC, "readinessProbe", "httpGet", "path")
	probes := ""
	if queue != nil {
		probes = envOf(queue)["SERVING_READINESS_PROBE"]
	}
	if path == "" || !strings.Contains(probes, `"path":"`+path+`"`) {
		t.Errorf("Deployment %s: queue-proxy's SERVING_READINESS_PROBE %q does not probe %q", dep.GetName(), probes, path)
	}

	testenv.Eventually(t, 30*time.Second, func() error {
		r, err := dyn.Resource(routes).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := r.GetLabels()["networking.knative.dev/visibility"]; got != visibility {
			return fmt.Errorf("Route %s: visibility %q, want %q", name, got, visibility)
		}
		return nil
	})
}

// envOf returns a container's literal environment.
func envOf(c map[string]any) map[string]string {
	out := map[string]string{}
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

// conditions returns an object's status conditions, type to status.
func conditions(obj *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		out[typ] = status
	}
	return out
}

// contains reports whether got has everything want has: maps key by key, lists element by
// element (each of want's elements somewhere in got), scalars equal.
func contains(got, want any) error {
	switch w := want.(type) {
	case nil:
		return nil
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("got %v, want %v", got, want)
		}
		for k, wv := range w {
			if err := contains(g[k], wv); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("got %v, want %v", got, want)
		}
		for _, wv := range w {
			found := false
			for _, gv := range g {
				if contains(gv, wv) == nil {
					found = true
					break
				}
			}
			if !found {
				return fmt.Errorf("no %v in %v", wv, g)
			}
		}
		return nil
	default:
		if fmt.Sprint(got) == fmt.Sprint(want) || reflect.DeepEqual(got, want) {
			return nil
		}
		return fmt.Errorf("got %v, want %v", got, want)
	}
}
