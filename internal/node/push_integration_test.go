package node_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/imagereflector/reflector/internal/node"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// pushRegistryPort is where the test's docker-registry listens at the node's address: the
// registry that notifies reflector-webhook of each push.
const pushRegistryPort = 5001

var policies = schema.GroupVersionResource{Group: "image.toolkit.fluxcd.io", Version: "v1", Resource: "imagepolicies"}

// pushes is what the end-to-end part of the Knative test drives: Debian's docker-registry in the
// node's namespaces, notifying the public route of reflector-webhook, and a namespace with an
// ImageRepository of it and an ImagePolicy.
type pushes struct {
	c         *node.Cluster
	namespace string
	repo      string // host/path of the image, as the ImageRepository names it
	transport http.RoundTripper
	// public is Traefik's public ClusterIP and host the public host of reflector-webhook.
	public, host string
	// webhook reaches the public host over TLS, trusting the node's route CA alone.
	webhook http.RoundTripper
	// ca is the route CA of the node.
	ca *routeCA
	// registryLog is the push registry's log, with its notifications' errors.
	registryLog string
	// pushed is when the registry last had a pushed image, and so sent its notification.
	pushed time.Time
}

// routeCA is the test's own CA of the node's public routes: Traefik serves a certificate of it
// for the hosts of node.KnativeDomain, and the push registry and `reflector check` trust it.
type routeCA struct {
	file  string // the CA's certificate, PEM
	pool  *x509.CertPool
	route node.RouteTLS
}

// newRouteCA makes a CA and, signed by it, a certificate for the Routes' hosts in
// reflector-system and for the domain's other hosts.
func newRouteCA(t *testing.T) *routeCA {
	t.Helper()
	ca, err := testenv.NewCA("node route CA")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"*.reflector-system." + node.KnativeDomain, "*." + node.KnativeDomain}
	cert, err := ca.Issue(names[0], names, false)
	if err != nil {
		t.Fatal(err)
	}
	r := &routeCA{file: filepath.Join(t.TempDir(), "route-ca.pem"), pool: ca.Pool(),
		route: node.RouteTLS{Cert: cert.CertPEM, Key: cert.KeyPEM}}
	if err := os.WriteFile(r.file, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// healthz asks reflector-webhook's /healthz through Traefik's public Service over TLS, as a
// registry reaches the route, and returns how long the answer took.
func (p *pushes) healthz(ctx context.Context, t *testing.T) time.Duration {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+p.public+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = p.host
	start := time.Now()
	resp, err := (&http.Client{Transport: p.webhook, Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("GET /healthz of %s: %v", p.host, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz of %s: %s", p.host, resp.Status)
	}
	return time.Since(start)
}

// startPushes starts docker-registry with a notification endpoint at the public https URL of
// reflector-webhook, whose host resolves, in the node's mount namespace, to Traefik's public
// Service, as a cluster's DNS record for its domain would, and whose certificate the registry
// trusts through the route CA ca; and makes namespace team with the receiver's Secret, an
// ImageRepository and a semver ImagePolicy.
func startPushes(ctx context.Context, t *testing.T, c *node.Cluster, ca *routeCA) *pushes {
	t.Helper()
	kube := c.Clientset()
	svc, err := kube.CoreV1().Services("traefik").Get(ctx, "traefik", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host := "reflector-webhook.reflector-system." + node.KnativeDomain
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte(fmt.Sprintf("127.0.0.1 localhost\n%s %s\n", svc.Spec.ClusterIP, host)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.NS.Run("mount", "--bind", hosts, "/etc/hosts"); err != nil {
		t.Fatal(err)
	}
	p := &pushes{c: c, namespace: "team", repo: fmt.Sprintf("%s:%d/app", node.NodeIP, pushRegistryPort),
		transport: &http.Transport{DialContext: c.NS.DialContext}, public: svc.Spec.ClusterIP, host: host, ca: ca,
		webhook: &http.Transport{DialContext: c.NS.DialContext, TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: host, MinVersion: tls.VersionTLS12}}}
	token := "push-token-0123456789abcdef"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	hook := fmt.Sprintf("https://%s/hook/distribution/%s", host, p.namespace)
	// A notification waits 30 s for its answer, not the stack's 2 s: from zero the answer comes
	// when the webhook's pod is up, and a retry after a timeout would be measured as start time.
	config := stack.RegistryConfig(filepath.Join(dir, "data"), fmt.Sprintf("%s:%d", node.NodeIP, pushRegistryPort), hook, token, time.Second)
	if !strings.Contains(config, "timeout: 2s\n") {
		t.Fatalf("the registry's configuration has no notification timeout of 2 s to lengthen:\n%s", config)
	}
	config = strings.Replace(config, "timeout: 2s\n", "timeout: 30s\n", 1)
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath(stack.Registry)
	if err != nil {
		t.Fatalf("%s: %v (hack/deps.sh installs it)", stack.Registry, err)
	}
	// Go's crypto/x509 reads SSL_CERT_FILE: the registry's notifications trust the route CA.
	prog, err := c.StartProgram("push-registry", bin, append(os.Environ(), "SSL_CERT_FILE="+ca.file), "serve", cfg)
	if err != nil {
		t.Fatal(err)
	}
	probe := &http.Client{Transport: p.transport, Timeout: 2 * time.Second}
	p.registryLog = prog.Log()
	if err := testenv.WaitReady(ctx, prog, time.Minute, func() error {
		resp, err := probe.Get("http://" + strings.TrimSuffix(p.repo, "/app") + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}); err != nil {
		t.Fatalf("the push registry: %v", err)
	}
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Secret
metadata:
  name: reflector-webhook
  namespace: %[1]s
stringData:
  token: %[2]s
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: app
  namespace: %[1]s
spec:
  image: %[3]s
  insecure: true
  interval: 1h
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: app
  namespace: %[1]s
spec:
  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: ">=1.0.0"
`, p.namespace, token, p.repo)
	if _, err := c.Apply(ctx, "", []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	return p
}

// push pushes a new image as tag and returns when the registry has it.
func (p *pushes) push(t *testing.T, tag string) {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(p.repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithTransport(p.transport)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

// logRoute logs what the path of a notification saw: the push registry's last notification
// lines and Traefik's last log lines.
func (p *pushes) logRoute(ctx context.Context, t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(p.registryLog); err == nil {
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "sink") || strings.Contains(l, "notif") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 10 {
			lines = lines[len(lines)-10:]
		}
		t.Logf("the push registry's notifications:\n%s", strings.Join(lines, "\n"))
	}
	if out, err := p.c.Kubectl(ctx, nil, "logs", "-n", "traefik", "deployment/traefik", "--tail=30"); err == nil {
		t.Logf("Traefik:\n%s", out)
	}
}

// latestRef returns the ImagePolicy's status.latestRef as image:tag ("" when it has none).
func latestRef(obj *unstructured.Unstructured) string {
	img, _, _ := unstructured.NestedString(obj.Object, "status", "latestRef", "name")
	tag, _, _ := unstructured.NestedString(obj.Object, "status", "latestRef", "tag")
	if img == "" {
		return ""
	}
	return img + ":" + tag
}

// pushToLatest pushes tag and returns how long the ImagePolicy took to show it as latestRef,
// from the moment the registry had it, watching the policy.
func (p *pushes) pushToLatest(ctx context.Context, t *testing.T, tag string, within time.Duration) time.Duration {
	t.Helper()
	res := p.c.Dynamic().Resource(policies).Namespace(p.namespace)
	// The watch starts at a list's resource version, the apiserver's current one: the object's
	// own can be older than the watch cache, as it is for a policy untouched since its CRD was
	// replaced, and the watch would end at once with 410 Gone.
	cur, err := res.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=app"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	w, err := res.Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=app", ResourceVersion: cur.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	p.push(t, tag)
	pushed := time.Now()
	p.pushed = pushed
	want := p.repo + ":" + tag
	for ev := range w.ResultChan() {
		if ev.Type != watch.Modified {
			continue
		}
		if obj, ok := ev.Object.(*unstructured.Unstructured); ok && latestRef(obj) == want {
			return time.Since(pushed)
		}
	}
	got, _ := res.Get(ctx, "app", metav1.GetOptions{})
	p.logRoute(ctx, t)
	t.Fatalf("latestRef is not %s within %s after the push: %s", want, within, latestRef(got))
	return 0
}

// functions are reflector's Knative Services.
var functions = []string{"reflector-webhook", "reflector-scan", "reflector-policy"}

// reflectorPods returns reflector's pods that have not ended, by Service ("reflector-cron" for
// the CronJob's): the functions' and the CronJob's, terminating ones included, since those
// still hold their requests on the node. serving is false for a pod being deleted.
func reflectorPods(ctx context.Context, c *node.Cluster) ([]corev1.Pod, error) {
	var all []corev1.Pod
	for _, sel := range []string{"serving.knative.dev/service", "app.kubernetes.io/name=reflector-cron"} {
		pods, err := c.Clientset().CoreV1().Pods("reflector-system").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				all = append(all, p)
			}
		}
	}
	return all, nil
}

// podService is the Service of one of reflectorPods.
func podService(p corev1.Pod) string {
	if svc := p.Labels["serving.knative.dev/service"]; svc != "" {
		return svc
	}
	return p.Labels["app.kubernetes.io/name"]
}

// waitZero waits until reflector has no pod but the store's anchor: none of the functions',
// terminating ones included, and none of the CronJob's running. A pod that Knative scaled
// away keeps its CPU request while its queue-proxy drains; a round that started beside it
// would measure the node's spare capacity, not a start from idle.
func waitZero(ctx context.Context, c *node.Cluster, within time.Duration) error {
	_, err := waitIdle(ctx, c, within)
	return err
}

// idleness is what the node held when the functions had just scaled to zero: the first moment
// that none of their pods was serving, while those scaled away were still terminating.
type idleness struct {
	// allocatable and requested are the node's CPU, in millicores: what pods may request, and
	// what the pods bound to it and not ended requested at that moment, terminating included.
	allocatable, requested int64
	// terminating lists the reflector pods being deleted then, with their CPU request.
	terminating []string
	// gone is how long each of those took from its deletion until it was gone.
	gone []time.Duration
	// waited is how long waitIdle waited after that moment for no reflector pod at all.
	waited time.Duration
}

func (i idleness) String() string {
	if len(i.terminating) == 0 {
		return fmt.Sprintf("no reflector pod was terminating; the node's pods requested %dm of %dm CPU", i.requested, i.allocatable)
	}
	gone := make([]string, len(i.gone))
	for j, d := range i.gone {
		gone[j] = d.Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("the node's pods requested %dm of %dm CPU, of which terminating reflector pods %s; they were gone %s after their deletion, idle %s after the functions' last pod stopped serving",
		i.requested, i.allocatable, strings.Join(i.terminating, ", "), strings.Join(gone, ", "), i.waited.Round(100*time.Millisecond))
}

// waitIdle is waitZero, and tells what the node held when the functions stopped serving.
func waitIdle(ctx context.Context, c *node.Cluster, within time.Duration) (idleness, error) {
	var idle idleness
	deadline := time.Now().Add(within)
	var stopped time.Time
	deleted := map[string]time.Time{} // terminating pods: when their deletion was asked for
	for {
		pods, err := reflectorPods(ctx, c)
		now := time.Now()
		if err == nil {
			serving := false
			seen := map[string]bool{}
			for _, p := range pods {
				seen[p.Name] = true
				if p.DeletionTimestamp == nil {
					serving = true
					continue
				}
				if _, ok := deleted[p.Name]; !ok {
					grace := time.Duration(0)
					if p.DeletionGracePeriodSeconds != nil {
						grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
					}
					deleted[p.Name] = p.DeletionTimestamp.Time.Add(-grace)
				}
			}
			if stopped.IsZero() && !serving {
				stopped = now
				idle.allocatable, idle.requested, err = nodeCPU(ctx, c)
				for _, p := range pods {
					idle.terminating = append(idle.terminating, fmt.Sprintf("%s %dm", podService(p), podCPU(p)))
				}
			}
			for name, at := range deleted {
				if !seen[name] {
					if !stopped.IsZero() {
						idle.gone = append(idle.gone, now.Sub(at))
					}
					delete(deleted, name)
				}
			}
			if err == nil && len(pods) == 0 {
				idle.waited = now.Sub(stopped)
				return idle, nil
			}
		}
		if now.After(deadline) {
			return idle, fmt.Errorf("reflector pods after %s: %d (%v)", within, len(pods), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nodeCPU returns the node's allocatable CPU and the CPU requests of the pods bound to it that
// have not ended, in millicores.
func nodeCPU(ctx context.Context, c *node.Cluster) (allocatable, requested int64, err error) {
	n, err := c.Clientset().CoreV1().Nodes().Get(ctx, node.NodeName, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	pods, err := c.Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.NodeName})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			requested += podCPU(p)
		}
	}
	return n.Status.Allocatable.Cpu().MilliValue(), requested, nil
}

// podCPU returns a pod's CPU request in millicores as the scheduler counts it: its containers'
// requests, or its largest init container's when that is more.
func podCPU(p corev1.Pod) int64 {
	var sum, initMax int64
	for _, ct := range p.Spec.Containers {
		sum += ct.Resources.Requests.Cpu().MilliValue()
	}
	for _, ct := range p.Spec.InitContainers {
		initMax = max(initMax, ct.Resources.Requests.Cpu().MilliValue())
	}
	return max(sum, initMax)
}

// percentile returns the p-th percentile (0 to 100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
