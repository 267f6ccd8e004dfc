package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// KnativeOptions choose which of Knative's programs StartKnative runs. Each needs `make
// knative-env` (hack/knative.sh), which builds them so that their probe server, fixed on port
// 8080 in Knative's code, listens where KNATIVE_PROBES_PORT says: every port here is one that
// PortForProcess picks at start, and picks again when another program took it first, so that
// several environments and `make run` can share a host.
type KnativeOptions struct {
	// Serving runs Serving's webhook and controller: Services, Configurations, Revisions and
	// their Deployments and PodAutoscalers. Routes and Services never become Ready: there is no
	// ingress, autoscaler or kubelet.
	Serving bool
	// Eventing runs Eventing's webhook, which also runs the SinkBinding controller.
	Eventing bool
	// EventingController runs Eventing's controller too (sources, Triggers, Channels).
	EventingController bool
}

// Knative is what StartKnative started. Env.Stop stops its processes, before the apiserver.
type Knative struct {
	// ServingVersion and EventingVersion are the versions of the programs, and of the module
	// whose config/core YAML was applied.
	ServingVersion, EventingVersion string
}

// ErrKnativeMissing is the error of StartKnative when `make knative-env` has not built the
// programs it needs.
var ErrKnativeMissing = errors.New("knative programs not built: run `make knative-env`")

// knativeBinaries lists each component's programs: the Deployment of Knative's config/core
// that describes it, the binary, and the name of its webhook Service when it is a webhook.
var knativeBinaries = map[string][]struct{ deployment, binary, service string }{
	"serving":  {{"webhook", "webhook", "webhook"}, {"controller", "controller", ""}},
	"eventing": {{"eventing-webhook", "webhook", "eventing-webhook"}, {"eventing-controller", "controller", ""}},
}

// KnativeBinDir returns where hack/knative.sh leaves a component's ("serving" or "eventing")
// programs, and their version; an error wraps ErrKnativeMissing.
func KnativeBinDir(component string) (dir, version string, err error) {
	link := filepath.Join(BinDir(), "knative-"+component)
	target, err := os.Readlink(link)
	if err != nil {
		return "", "", fmt.Errorf("%w (%s: %v)", ErrKnativeMissing, link, err)
	}
	// knative-<component>-<version>-<probe patch>
	parts := strings.Split(strings.TrimPrefix(filepath.Base(target), "knative-"+component+"-"), "-")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "v") {
		return "", "", fmt.Errorf("%w (%s points at %s, built by an older hack/knative.sh)", ErrKnativeMissing, link, target)
	}
	dir = target
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(BinDir(), target)
	}
	for _, b := range knativeBinaries[component] {
		if _, err := os.Stat(filepath.Join(dir, b.binary)); err != nil {
			return "", "", fmt.Errorf("%w (%v)", ErrKnativeMissing, err)
		}
	}
	return dir, parts[0], nil
}

// KnativeEnv starts an apiserver of the test's own, with Knative's programs, and stops both when
// the test ends. Knative's webhooks stay registered in the apiserver they ran against, so they
// never share Kube's. Under -short the test is skipped, and so it is when the programs are not
// built, with the command that builds them.
func KnativeEnv(t testing.TB, opts KnativeOptions) (*Env, *Knative) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts kube-apiserver and Knative's control planes; run it without -short")
	}
	for _, c := range []struct {
		on   bool
		name string
	}{{opts.Serving, "serving"}, {opts.Eventing || opts.EventingController, "eventing"}} {
		if _, _, err := KnativeBinDir(c.name); c.on && err != nil {
			t.Skipf("Knative %s is not built: %v", c.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	kn, err := env.StartKnative(ctx, opts)
	if err != nil {
		t.Fatalf("starting Knative: %v", err)
	}
	return env, kn
}

// StartKnative installs Knative's config/core YAML (CRDs, ConfigMaps, webhook configurations,
// RBAC; the `ko://` images of its ConfigMaps become `ko.local/...`, which Serving does not try to
// resolve) into e, and runs the chosen programs on this host against it. A webhook is reached
// through a Service of type ExternalName that names localhost, on the port the webhook
// configurations name; the webhook's own certificate controller fills its Secret, and the
// webhook configurations get their CA bundle and rules from the webhook itself. It returns once
// every webhook is registered and answers, and every controller reports ready.
func (e *Env) StartKnative(ctx context.Context, opts KnativeOptions) (*Knative, error) {
	kn := &Knative{}
	var comps []knativeComponent
	if opts.Serving {
		comps = append(comps, knativeComponent{name: "serving", namespace: "knative-serving", programs: []string{"webhook", "controller"}})
	}
	if opts.Eventing || opts.EventingController {
		c := knativeComponent{name: "eventing", namespace: "knative-eventing"}
		if opts.Eventing {
			c.programs = append(c.programs, "eventing-webhook")
		}
		if opts.EventingController {
			c.programs = append(c.programs, "eventing-controller")
		}
		comps = append(comps, c)
	}
	for _, c := range comps {
		bin, version, err := KnativeBinDir(c.name)
		if err != nil {
			return nil, err
		}
		if c.name == "serving" {
			kn.ServingVersion = version
		} else {
			kn.EventingVersion = version
		}
		modDir, err := moduleDir(ctx, "knative.dev/"+c.name+"@"+version)
		if err != nil {
			return nil, err
		}
		yamlDirs := []string{filepath.Join(modDir, "config", "core")}
		if c.name == "serving" {
			// Serving's release takes the CRDs of networking's Ingresses, Certificates and
			// ServerlessServices, config-network and the caching Image CRD from the modules
			// it requires (symbolic links in its repository, absent from its module zip).
			for _, dep := range []string{"knative.dev/networking", "knative.dev/caching"} {
				dir, err := requiredModuleDir(ctx, modDir, dep)
				if err != nil {
					return nil, err
				}
				yamlDirs = append(yamlDirs, filepath.Join(dir, "config"))
			}
		}
		if err := e.startKnativeComponent(ctx, c, bin, yamlDirs); err != nil {
			return nil, fmt.Errorf("knative %s: %w", c.name, err)
		}
	}
	return kn, nil
}

// knativeComponent is Serving or Eventing, in its namespace, with the programs to run.
type knativeComponent struct {
	name, namespace string
	programs        []string // the Deployments of config/core to run
}

func (e *Env) startKnativeComponent(ctx context.Context, c knativeComponent, bin string, yamlDirs []string) error {
	name, namespace, programs := c.name, c.namespace, c.programs
	var first, rest, deployments []*unstructured.Unstructured
	walk := func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		objs, err := DecodeYAML(bytes.ReplaceAll(b, []byte("ko://"), []byte("ko.local/")))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, o := range objs {
			switch {
			case filepath.Base(filepath.Dir(path)) == "deployments":
				// The programs run on this host; their Deployments only describe them.
				if o.GetKind() == "Deployment" {
					deployments = append(deployments, o)
				}
			case o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition":
				first = append(first, o)
			default:
				rest = append(rest, o)
			}
		}
		return nil
	}
	for _, dir := range yamlDirs {
		if err := filepath.WalkDir(dir, walk); err != nil {
			return err
		}
	}
	if err := e.applyObjects(ctx, first); err != nil {
		return err
	}
	for _, o := range first {
		if o.GetKind() == "CustomResourceDefinition" {
			if err := e.waitEstablished(ctx, o.GetName()); err != nil {
				return err
			}
		}
	}

	// One port per webhook, written into its webhook configurations and its Service.
	ports := map[string]int{} // webhook Service -> port
	for _, b := range knativeBinaries[name] {
		if b.service != "" {
			p, err := pickPort()
			if err != nil {
				return err
			}
			ports[b.service] = p
		}
	}
	var webhookConfigs, others []*unstructured.Unstructured
	for _, o := range rest {
		if o.GetKind() == "MutatingWebhookConfiguration" || o.GetKind() == "ValidatingWebhookConfiguration" {
			webhookConfigs = append(webhookConfigs, o)
		} else {
			others = append(others, o)
		}
	}
	if err := e.applyObjects(ctx, append(others, webhookObjects(webhookConfigs, namespace, ports)...)); err != nil {
		return err
	}

	for _, program := range programs {
		var dep *unstructured.Unstructured
		for _, d := range deployments {
			if d.GetName() == program {
				dep = d
			}
		}
		if dep == nil {
			return fmt.Errorf("no Deployment %s in %s", program, yamlDirs[0])
		}
		var binary, service string
		for _, b := range knativeBinaries[name] {
			if b.deployment == program {
				binary, service = b.binary, b.service
			}
		}
		environ, err := e.knativeEnviron(ctx, dep, namespace)
		if err != nil {
			return err
		}
		if v, err := e.serverVersion(ctx); err == nil && strings.HasPrefix(v, "v0.0.0-") {
			// hack/testenv.sh builds kube-apiserver without a version stamp.
			environ = append(environ, "KUBERNETES_MIN_VERSION=v0.0.0")
		}
		environ = append(environ,
			// Every server of the program on 127.0.0.1 (hack/knative.sh), not every interface.
			"KNATIVE_LISTEN_HOST=127.0.0.1",
			"METRICS_PROMETHEUS_HOST=127.0.0.1",
			"KUBECONFIG="+e.Kubeconfig,
		)
		logName := "knative-" + name + "-" + binary
		attempt := 0
		if err := RetryPorts(func() error {
			attempt++
			if attempt > 1 && service != "" {
				// The webhook's port was taken: another one, in its configurations too.
				p, err := pickPort()
				if err != nil {
					return err
				}
				ports[service] = p
				if err := e.applyObjects(ctx, webhookObjects(webhookConfigs, namespace, map[string]int{service: p})); err != nil {
					return err
				}
			}
			return e.startKnativeProgram(ctx, logName, filepath.Join(bin, binary), environ,
				knativeWebhook{service: service, port: ports[service], configs: webhookConfigs})
		}); err != nil {
			return err
		}
	}
	return nil
}

// webhookObjects returns the webhook configurations with the port of each webhook Service of
// ports in its clientConfig, and for each such Service one of type ExternalName that names
// localhost on that port.
func webhookObjects(configs []*unstructured.Unstructured, namespace string, ports map[string]int) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for _, o := range configs {
		whs, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, w := range whs {
			svc, _, _ := unstructured.NestedMap(w.(map[string]any), "clientConfig", "service")
			svcName, _ := svc["name"].(string)
			if p, ok := ports[svcName]; ok {
				svc["port"] = int64(p)
				_ = unstructured.SetNestedMap(w.(map[string]any), svc, "clientConfig", "service")
			}
		}
		_ = unstructured.SetNestedSlice(o.Object, whs, "webhooks")
		objs = append(objs, o)
	}
	for svcName, p := range ports {
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": svcName, "namespace": namespace},
			"spec": map[string]any{
				"type": "ExternalName", "externalName": "localhost",
				"ports": []any{map[string]any{"name": "https-webhook", "port": int64(p)}},
			},
		}})
	}
	return objs
}

// knativeWebhook is the webhook Service service that a Knative program serves, if any (empty:
// none), on port, as the webhook configurations configs name it.
type knativeWebhook struct {
	service string
	port    int
	configs []*unstructured.Unstructured
}

// startKnativeProgram starts one of Knative's programs with environ, on ports that
// PortForProcess picks and the webhook port when it serves the webhook wh, and waits until it
// is ready. When the program exits because one of its ports was taken, the error wraps
// ErrAddrInUse.
func (e *Env) startKnativeProgram(ctx context.Context, logName, binary string, environ []string, wh knativeWebhook) error {
	service, webhookPort, webhookConfigs := wh.service, wh.port, wh.configs
	var ports [3]int
	for i := range ports {
		p, err := pickPort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	probes := ports[0]
	environ = append(slices.Clip(environ),
		"KNATIVE_PROBES_PORT="+strconv.Itoa(probes),
		"PROFILING_PORT="+strconv.Itoa(ports[1]),
		"METRICS_PROMETHEUS_PORT="+strconv.Itoa(ports[2]),
	)
	if service != "" {
		environ = append(environ, "WEBHOOK_PORT="+strconv.Itoa(webhookPort))
	}
	proc, err := e.startProgram(logName, binary, environ, "--kubeconfig="+e.Kubeconfig)
	if err != nil {
		return err
	}
	ready := func() error {
		resp, err := probe.Get("http://127.0.0.1:" + strconv.Itoa(probes) + "/readiness")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readiness: %s", resp.Status)
		}
		return nil
	}
	if service != "" {
		ready = func() error { return e.webhookReady(ctx, webhookConfigs, service, webhookPort) }
	}
	return e.waitStarted(ctx, proc, 90*time.Second, false, ready)
}

// knativeEnviron is the environment of a Deployment's first container as a pod would see it,
// with this process's own environment (PATH, HOME) underneath: values as written, the pod's
// namespace and name from fieldRefs, and ConfigMap values from the apiserver.
func (e *Env) knativeEnviron(ctx context.Context, dep *unstructured.Unstructured, namespace string) ([]string, error) {
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			environ = append(environ, kv)
		}
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		return nil, fmt.Errorf("Deployment %s has no container", dep.GetName())
	}
	envs, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	for _, v := range envs {
		m := v.(map[string]any)
		name, _ := m["name"].(string)
		if value, ok := m["value"].(string); ok {
			environ = append(environ, name+"="+value)
			continue
		}
		if path, ok, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath"); ok {
			switch path {
			case "metadata.namespace":
				environ = append(environ, name+"="+namespace)
			case "metadata.name":
				environ = append(environ, name+"="+dep.GetName()+"-0")
			}
			continue
		}
		if ref, ok, _ := unstructured.NestedStringMap(m, "valueFrom", "configMapKeyRef"); ok {
			cm, err := e.dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).
				Namespace(namespace).Get(ctx, ref["name"], metav1.GetOptions{})
			if err == nil {
				value, _, _ := unstructured.NestedString(cm.Object, "data", ref["key"])
				environ = append(environ, name+"="+value)
			} else {
				// Images of optional features whose ConfigMaps are not in config/core.
				environ = append(environ, name+"=ko.local/"+strings.ToLower(name))
			}
		}
	}
	return environ, nil
}

// webhookReady reports whether the webhook behind service has registered itself in every
// webhook configuration that names it (a CA bundle) and answers TLS on port.
func (e *Env) webhookReady(ctx context.Context, configs []*unstructured.Unstructured, service string, port int) error {
	for _, c := range configs {
		res := "mutatingwebhookconfigurations"
		if c.GetKind() == "ValidatingWebhookConfiguration" {
			res = "validatingwebhookconfigurations"
		}
		got, err := e.dynamic.Resource(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: res}).
			Get(ctx, c.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		whs, _, _ := unstructured.NestedSlice(got.Object, "webhooks")
		for _, w := range whs {
			wm := w.(map[string]any)
			if name, _, _ := unstructured.NestedString(wm, "clientConfig", "service", "name"); name != service {
				continue
			}
			if ca, _, _ := unstructured.NestedString(wm, "clientConfig", "caBundle"); ca == "" {
				return fmt.Errorf("%s %s has no CA bundle yet", c.GetKind(), c.GetName())
			}
		}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port),
		&tls.Config{InsecureSkipVerify: true}) // only whether it answers; the apiserver verifies
	if err != nil {
		return err
	}
	return conn.Close()
}

func (e *Env) applyObjects(ctx context.Context, objs []*unstructured.Unstructured) error {
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteString("\n")
	}
	_, err := e.Apply(ctx, "", buf.Bytes())
	return err
}

func (e *Env) waitEstablished(ctx context.Context, name string) error {
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	err := waitFor(ctx, 30*time.Second, nil, func() error {
		obj, err := e.dynamic.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !established(obj) {
			return errors.New("not established")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s: %w", name, err)
	}
	return nil
}

// moduleDir returns where the Go module cache holds mod (path@version), downloading it if the
// cache does not have it yet.
func moduleDir(ctx context.Context, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	// Outside any module, so that the download cannot touch a go.mod.
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Error != "" || info.Dir == "" {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("Knative's YAML comes from the Go module %s, which could not be downloaded: %v %s %s",
			mod, err, info.Error, stderr)
	}
	return info.Dir, nil
}

// requiredModuleDir returns the module cache directory of dep at the version that the go.mod in
// modDir requires.
func requiredModuleDir(ctx context.Context, modDir, dep string) (string, error) {
	b, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(dep) + `\s+(\S+)`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s/go.mod does not require %s", modDir, dep)
	}
	return moduleDir(ctx, dep+"@"+string(m[1]))
}

// serverVersion is the apiserver's gitVersion, as /version reports it.
func (e *Env) serverVersion(ctx context.Context) (string, error) {
	body, err := e.Get(ctx, "/version")
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("the apiserver's /version: %w", err)
	}
	return v.GitVersion, nil
}
