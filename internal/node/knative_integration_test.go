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
	ca := newRouteCA(t)
	if err := c.InstallKnative(ctx, ca.route); err != nil {
		t.Fatal(err)
	}
	t.Logf("Knative Serving, Eventing and Traefik were up in %s", time.Since(step).Round(time.Second))

	// The idle window before scale to zero: by default shortened from Knative's (stable window
	// 60 s, grace period 30 s) so that the rounds below take minutes, not most of an hour;
	// REFLECTOR_NODE_WINDOW=knative keeps Knative's. REFLECTOR_NODE_ROUNDS sets how many rounds
	// from zero are measured (default 20).
	window, rounds := nodeWindow(t), nodeRounds(t)
	if window != "" {
		if _, err := c.Kubectl(ctx, nil, "patch", "configmap", "config-autoscaler", "-n", "knative-serving", "--type", "merge",
			"-p", fmt.Sprintf(`{"data":{"stable-window":%q,"scale-to-zero-grace-period":%q}}`, window, window)); err != nil {
			t.Fatal(err)
		}
		t.Logf("stable window and scale-to-zero grace period: %s", window)
	} else {
		t.Log("stable window and scale-to-zero grace period: Knative's defaults (60 s, 30 s)")
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
	rel, p := installRelease(ctx, t, c, ca)
	if _, err := c.Kubectl(ctx, nil, "wait", "--for=condition=Available", "deployment/reflector-store", "-n", "reflector-system", "--timeout=3m"); err != nil {
		t.Fatalf("the store's anchor: %v", err)
	}

	// A second node in the store's zone that only the scheduler sees, from now until the rounds
	// from zero are done: every pod placed meanwhile (the functions' after each scale to zero,
	// the CronJob's each minute) must go to the store's node.
	ph := startPhantom(ctx, t, c)

	t.Logf("first push to latestRef (every function starting): %s", ms(p.pushToLatest(ctx, t, "1.0.0", 5*time.Minute)))
	var warm []time.Duration
	for i := 1; i <= 10; i++ {
		warm = append(warm, p.pushToLatest(ctx, t, fmt.Sprintf("1.0.%d", i), time.Minute))
	}
	t.Logf("warm push to latestRef: p50 %s, max %s over %d pushes", ms(percentile(warm, 50)), ms(percentile(warm, 100)), len(warm))
	checkInstalled(ctx, t, c, rel, p)

	// Each round: the webhook's first answer from zero alone (one pod start and nothing else:
	// the floor of a cold start on this node), then a push from zero. With Knative's windows
	// the first is left out, so that twenty rounds take half an hour, not an hour; the push's
	// own notification is answered by a pod from zero all the same.
	alone := window != ""
	var cold, answer, notified []time.Duration
	starts, aloneStarts := startTable{}, startTable{}
	started := map[string][]int{} // pods started per push from zero, by Service
	for i := 1; i <= rounds; i++ {
		webhookPod := "not measured"
		var hs *podStarts // the webhook's start alone
		if i == 1 {
			// The round after the warm pushes starts when their pods are gone, not merely
			// scaled away: what they still held on the node then is the figure.
			idle, err := waitIdle(ctx, c, 4*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after the warm pushes, when the functions had scaled to zero: %s", idle)
			// Each revision that the install made started a pod of its own.
			if out, err := c.Kubectl(ctx, nil, "get", "revisions", "-n", "reflector-system", "-o",
				"custom-columns=NAME:.metadata.name,CREATED:.metadata.creationTimestamp,GENERATION:.metadata.labels.serving\\.knative\\.dev/configurationGeneration"); err == nil {
				t.Logf("the functions' revisions:\n%s", out)
			}
		}
		if alone {
			if err := waitZero(ctx, c, 4*time.Minute); err != nil {
				t.Fatal(err)
			}
			var stop func()
			hs, stop = watchPodStarts(ctx, t, c)
			asked := time.Now()
			a := p.healthz(ctx, t)
			stop()
			answer = append(answer, a)
			webhookPod = ms(a) + ", no pod seen"
			if created := hs.created("reflector-webhook"); !created.IsZero() {
				webhookPod = ms(a) + ", its pod created " + ms(created.Sub(asked)) + " after the request"
				if steps, _, err := hs.steps(c); err == nil {
					aloneStarts.add(steps)
					webhookPod += ": " + formatSteps(steps["reflector-webhook"])
				} else {
					webhookPod += ": " + err.Error()
				}
			}
		}
		// A push from zero starts the webhook and the policy function, one pod each, and no
		// reflector-scan pod: the update events of the webhook's own annotation and status write
		// reach the webhook's /broker, whose pod is running (docs/topology.md).
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
		// The push's notification was answered when the webhook pod's queue-proxy logged it.
		var hook string
		for _, s := range ps.seen {
			if s.service == "reflector-webhook" {
				hook = s.name
			}
		}
		if r, ok, err := c.FirstRequest("reflector-system", hook, "queue-proxy"); err == nil && ok && hook != "" {
			notified = append(notified, r.End.Sub(p.pushed))
		}
		perService := ps.count()
		for _, svc := range functions {
			started[svc] = append(started[svc], perService[svc])
			if perService[svc] != pushStarts[svc] {
				t.Errorf("round %d: the push from zero started %d pods of %s, want %d", i, perService[svc], svc, pushStarts[svc])
			}
		}
		var line []string
		for _, svc := range functions {
			if s, ok := steps[svc]; ok {
				line = append(line, svc+": "+formatSteps(s))
			}
		}
		t.Logf("round %d from zero: webhook alone %s; push to latestRef %s; pods started %v: %s; other pods: %v",
			i, webhookPod, ms(d), perService, strings.Join(line, "; "), extra)
		if waited := append(hs.unschedulable(), ps.unschedulable()...); len(waited) > 0 {
			t.Logf("round %d: pods that waited for a node, with the scheduler's reason: %s", i, strings.Join(waited, "; "))
		}
	}
	if alone {
		t.Logf("one pod start alone (the webhook's /healthz from zero), by step:%s", aloneStarts)
		t.Logf("webhook answer from zero: p50 %s, max %s over %d rounds", ms(percentile(answer, 50)), ms(percentile(answer, 100)), rounds)
	}
	t.Logf("pod starts of a push from zero, by step:%s", starts)
	if len(notified) > 0 {
		t.Logf("the push's notification answered from zero: p50 %s, max %s over %d rounds", ms(percentile(notified, 50)), ms(percentile(notified, 100)), len(notified))
	}
	t.Logf("push to latestRef from zero: p50 %s, max %s over %d rounds", ms(percentile(cold, 50)), ms(percentile(cold, 100)), rounds)
	for _, svc := range functions {
		t.Logf("pods of %s started per push from zero: %v (%d in %d rounds)", svc, started[svc], sum(started[svc]), rounds)
	}
	ph.check(ctx, t, c)

	lifecycle(ctx, t, c, p, rel.dist)
	uninstall(ctx, t, c, rel, p)
}

// pushStarts is how many pods of each function a push from zero starts: the webhook's, which
// answers the notification and scans, and the policy function's for TagsChanged. Nothing else
// is needed, and nothing else may start.
var pushStarts = map[string]int{"reflector-webhook": 1, "reflector-scan": 0, "reflector-policy": 1}

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
