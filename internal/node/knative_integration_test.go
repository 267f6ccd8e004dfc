package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/node"
)

// TestNodeKnativeIntegration installs Knative Serving (with Traefik as its KIngress) and Eventing
// (in-memory channel, channel-based broker) on the node from the images ko built, sets the
// feature flags that docs/install.md tells a cluster admin to set, and installs reflector from
// the bundle of `make release` over Flux's own CRDs and objects, with the commands of
// docs/migrate.md and docs/install.md (installRelease): every Knative Service, Trigger, source
// and binding must become Ready, through real pods. Then pushes notified to the public route
// reach latestRef, warm and from zero pods (measured), `reflector check` is green, the
// installation lives through what lifecycle does to it, and the uninstall keeps the CRDs and the
// objects.
func TestNodeKnativeIntegration(t *testing.T) {
	if os.Getenv("REFLECTOR_CLUSTER_TEST") == "" {
		t.Skip("starts a single-node cluster in a network namespace, as root: make cluster-test (REFLECTOR_CLUSTER_TEST=1)")
	}
	ctx := context.Background()
	start := time.Now()
	c, err := node.Start(ctx, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	t.Logf("the cluster was up in %s", time.Since(start).Round(time.Second))
	step := time.Now()
	if err := c.InstallKnative(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Knative Serving, Eventing and Traefik were up in %s", time.Since(step).Round(time.Second))

	// The idle window before scale to zero, shortened from Knative's defaults (stable window 60
	// s, grace period 30 s) so that the rounds below take minutes, not a quarter of an hour;
	// neither changes how a pod starts.
	if _, err := c.Kubectl(ctx, nil, "patch", "configmap", "config-autoscaler", "-n", "knative-serving", "--type", "merge",
		"-p", `{"data":{"stable-window":"6s","scale-to-zero-grace-period":"6s"}}`); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"knative-serving", "knative-eventing"} {
		features := documentedPatch(t, "config-features", ns)
		if _, err := c.Kubectl(ctx, nil, "patch", "configmap", "config-features", "-n", ns, "--type", "merge", "-p", features); err != nil {
			t.Fatal(err)
		}
	}

	// The queue-proxy logs each request (Knative's default request log template): the pod
	// start breakdown reads when each function's first request came. The revisions that
	// knative/ makes take it from their creation on.
	if _, err := c.Kubectl(ctx, nil, "patch", "configmap", "config-observability", "-n", "knative-serving", "--type", "merge",
		"-p", `{"data":{"logging.enable-request-log":"true"}}`); err != nil {
		t.Fatal(err)
	}

	// Over Flux's own CRDs and objects, from the bundle of `make release`, with the commands
	// of docs/migrate.md and docs/install.md.
	rel, p := installRelease(ctx, t, c)

	t.Logf("first push to latestRef (every function starting): %s", ms(p.pushToLatest(ctx, t, "1.0.0", 5*time.Minute)))
	var warm []time.Duration
	for i := 1; i <= 10; i++ {
		warm = append(warm, p.pushToLatest(ctx, t, fmt.Sprintf("1.0.%d", i), time.Minute))
	}
	t.Logf("warm push to latestRef: p50 %s, max %s over %d pushes", ms(percentile(warm, 50)), ms(percentile(warm, 100)), len(warm))
	checkInstalled(ctx, t, c, rel, p)

	rounds := 10
	var cold, answer []time.Duration
	starts := startTable{}
	for i := 1; i <= rounds; i++ {
		// The webhook's first answer from zero: what a registry's notification waits for.
		if err := waitZero(ctx, c, 4*time.Minute); err != nil {
			t.Fatal(err)
		}
		hs, stop := watchPodStarts(ctx, t, c)
		asked := time.Now()
		a := p.healthz(ctx, t)
		stop()
		answer = append(answer, a)
		webhookPod := "no pod seen"
		if created := hs.created("reflector-webhook"); !created.IsZero() {
			webhookPod = "its pod created " + ms(created.Sub(asked)) + " after the request"
			if steps, _, err := hs.steps(c); err == nil {
				webhookPod += ": " + formatSteps(steps["reflector-webhook"])
			} else {
				webhookPod += ": " + err.Error()
			}
		}
		// A push from zero: the webhook, the scan and the policy function all start.
		if err := waitZero(ctx, c, 4*time.Minute); err != nil {
			t.Fatal(err)
		}
		ps, stop := watchPodStarts(ctx, t, c)
		d := p.pushToLatest(ctx, t, fmt.Sprintf("1.1.%d", i), 3*time.Minute)
		time.Sleep(5 * time.Second) // for the pods the push started but latestRef did not wait for
		stop()
		cold = append(cold, d)
		steps, extra, err := ps.steps(c)
		if err != nil {
			t.Fatalf("round %d: the pods' start: %v", i, err)
		}
		starts.add(steps)
		var line []string
		for _, svc := range functions {
			if s, ok := steps[svc]; ok {
				line = append(line, svc+": "+formatSteps(s))
			}
		}
		t.Logf("round %d from zero: webhook answer %s (%s); push to latestRef %s; pods: %s; other pods: %v",
			i, ms(a), webhookPod, ms(d), strings.Join(line, "; "), extra)
	}
	t.Logf("pod starts from zero, by step:%s", starts)
	t.Logf("webhook answer from zero: p50 %s, max %s over %d rounds", ms(percentile(answer, 50)), ms(percentile(answer, 100)), rounds)
	t.Logf("push to latestRef from zero: p50 %s, max %s over %d rounds", ms(percentile(cold, 50)), ms(percentile(cold, 100)), rounds)

	lifecycle(ctx, t, c, p, rel.dist)
	uninstall(ctx, t, c, rel, p)
}

// documentedPatch returns the JSON merge patch of the `kubectl patch configmap NAME -n
// NAMESPACE` command of docs/install.md.
func documentedPatch(t *testing.T, name, namespace string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?s)kubectl patch configmap ` + regexp.QuoteMeta(name) + ` -n ` + regexp.QuoteMeta(namespace) + ` --type merge -p '([^']*)'`)
	m := re.FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/install.md has no `kubectl patch configmap %s -n %s` command", name, namespace)
	}
	if !json.Valid(m[1]) {
		t.Fatalf("docs/install.md: the %s patch is not JSON:\n%s", name, m[1])
	}
	return string(m[1])
}

// dumpCluster logs what the pods of the cluster are doing and the last lines of each
// container that is not ready, for a test that failed.
func dumpCluster(t *testing.T, c *node.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.Kubectl(ctx, nil, "get", "pods", "-A", "-o", "wide"); err == nil {
		t.Logf("pods:\n%s", out)
	}
	if out, err := c.Kubectl(ctx, nil, "get", "events", "-A", "--sort-by=.lastTimestamp"); err == nil {
		lines := strings.Split(out, "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		t.Logf("events:\n%s", strings.Join(lines, "\n"))
	}
	pods, err := c.Clientset().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				continue
			}
			args := []string{"logs", "-n", p.Namespace, p.Name, "-c", cs.Name, "--tail=20"}
			if cs.RestartCount > 0 {
				args = append(args, "--previous")
			}
			out, err := c.Kubectl(ctx, nil, args...)
			if err != nil {
				// The kubelet keeps no log of an earlier container once it has been removed:
				// the files under the node's pod-logs directory have the last ones.
				files, _ := filepath.Glob(filepath.Join(c.Dir, "kubelet", "pod-logs", p.Namespace+"_"+p.Name+"_*", cs.Name, "*.log"))
				out = err.Error()
				if len(files) > 0 {
					b, _ := os.ReadFile(files[len(files)-1])
					if len(b) > 4096 {
						b = b[len(b)-4096:]
					}
					out = string(b)
				}
			}
			t.Logf("%s/%s %s (restarts %d):\n%s", p.Namespace, p.Name, cs.Name, cs.RestartCount, out)
		}
	}
}
