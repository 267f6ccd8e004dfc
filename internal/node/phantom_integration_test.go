package node_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/imagereflector/reflector/internal/node"
	"github.com/imagereflector/reflector/internal/testenv"
)

// nodeWindow is the stable window and scale-to-zero grace period of the rounds from zero:
// REFLECTOR_NODE_WINDOW, "6s" when unset, "" (Knative's defaults) for "knative".
func nodeWindow(t *testing.T) string {
	switch w := os.Getenv("REFLECTOR_NODE_WINDOW"); w {
	case "":
		return "6s"
	case "knative":
		return ""
	default:
		if _, err := time.ParseDuration(w); err != nil {
			t.Fatalf("REFLECTOR_NODE_WINDOW=%q: a duration or knative", w)
		}
		return w
	}
}

// nodeRounds is how many rounds from zero are measured: REFLECTOR_NODE_ROUNDS, 20 when unset.
func nodeRounds(t *testing.T) int {
	s := os.Getenv("REFLECTOR_NODE_ROUNDS")
	if s == "" {
		return 20
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("REFLECTOR_NODE_ROUNDS=%q: a positive number", s)
	}
	return n
}

func sum(ns []int) int {
	total := 0
	for _, n := range ns {
		total += n
	}
	return total
}

// phantom is a PhantomNode in the store's zone and what was placed in reflector-system while it
// was there.
type phantom struct {
	*node.PhantomNode
	stop    func()
	removed bool

	mu     sync.Mutex
	placed map[string]string // pod name: node
	owner  map[string]string // pod name: its workload
	store  map[string]bool   // pod name: whether it mounts the store's claim
}

// startPhantom registers the phantom node, checks that the scheduler places a pod there that
// asks for it (and that the pod then stays Pending: no kubelet runs it), and watches where the
// pods of reflector-system go from now on.
func startPhantom(ctx context.Context, t *testing.T, c *node.Cluster) *phantom {
	t.Helper()
	pn, err := c.StartPhantomNode(ctx, "phantom")
	if err != nil {
		t.Fatal(err)
	}
	ph := &phantom{PhantomNode: pn, placed: map[string]string{}, owner: map[string]string{}, store: map[string]bool{}}
	t.Cleanup(func() {
		ph.stopWatch()
		if ph.removed {
			return
		}
		if err := pn.Stop(context.Background()); err != nil {
			t.Errorf("removing the phantom node: %v", err)
		}
	})
	if err := testenv.Poll(ctx, time.Minute, time.Second, func() error { return pn.Ready(ctx) }); err != nil {
		t.Fatal(err)
	}

	kube := c.Clientset()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "phantom-probe", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": pn.Name},
			Containers:   []corev1.Container{{Name: "pause", Image: c.Images["pause"]}},
		},
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(ctx, time.Minute, 500*time.Millisecond, func() error {
		got, err := kube.CoreV1().Pods("default").Get(ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Spec.NodeName != pn.Name {
			return fmt.Errorf("the probe pod is not on the phantom node: %q", got.Spec.NodeName)
		}
		return nil
	}); err != nil {
		t.Fatalf("the scheduler does not use the phantom node: %v", err)
	}
	time.Sleep(5 * time.Second)
	got, err := kube.CoreV1().Pods("default").Get(ctx, probe.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodPending {
		t.Fatalf("a pod on the phantom node is %s, want Pending: nothing runs it", got.Status.Phase)
	}
	zero := int64(0)
	if err := kube.CoreV1().Pods("default").Delete(ctx, probe.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	t.Logf("phantom node %s: Ready in zone %s; a pod that asks for it is scheduled there and stays Pending", pn.Name, node.Zone)

	list, err := kube.CoreV1().Pods("reflector-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := kube.CoreV1().Pods("reflector-system").Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// The pods that were there before (the store's anchor, Knative's adapter) are not counted
	// when their status changes.
	before := map[string]bool{}
	for _, pod := range list.Items {
		before[pod.Name] = true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || pod.Spec.NodeName == "" || before[pod.Name] {
				continue
			}
			ph.mu.Lock()
			if _, seen := ph.placed[pod.Name]; !seen {
				ph.placed[pod.Name] = pod.Spec.NodeName
				ph.owner[pod.Name] = workload(pod)
				for _, v := range pod.Spec.Volumes {
					if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "reflector-store" {
						ph.store[pod.Name] = true
					}
				}
			}
			ph.mu.Unlock()
		}
	}()
	var once sync.Once
	ph.stop = func() { once.Do(func() { cancel(); w.Stop(); <-done }) }
	return ph
}

func (ph *phantom) stopWatch() {
	if ph.stop != nil {
		ph.stop()
	}
}

// workload names what made a pod: its Knative Service, its CronJob's Job or its Deployment.
func workload(pod *corev1.Pod) string {
	switch {
	case pod.Labels["serving.knative.dev/service"] != "":
		return pod.Labels["serving.knative.dev/service"]
	case pod.Labels["app.kubernetes.io/name"] != "":
		return pod.Labels["app.kubernetes.io/name"]
	}
	return pod.Name
}

// check waits for the CronJob to have placed a pod (it runs each minute), then fails for every
// pod that mounts the store and was placed on the phantom node, and removes the node. Other pods
// of reflector-system (Knative's ApiServerSource adapter) may go to any node of a real cluster:
// those placed there are logged. A Deployment's new pod that never runs leaves the old one
// serving, and the phantom's removal frees the rollout.
func (ph *phantom) check(ctx context.Context, t *testing.T, c *node.Cluster) {
	t.Helper()
	cronPlaced := func() int {
		ph.mu.Lock()
		defer ph.mu.Unlock()
		n := 0
		for _, w := range ph.owner {
			if w == "reflector-cron" {
				n++
			}
		}
		return n
	}
	if err := testenv.Poll(ctx, 2*time.Minute, time.Second, func() error {
		if cronPlaced() == 0 {
			return fmt.Errorf("no pod of the CronJob was placed")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	ph.stopWatch()
	if err := ph.Err(); err != nil {
		t.Error(err)
	}
	if err := ph.Ready(ctx); err != nil {
		t.Errorf("the phantom node was no choice for the scheduler at the end: %v", err)
	}
	ph.mu.Lock()
	byWorkload := map[string]int{}
	var wrong, elsewhere []string
	for pod, n := range ph.placed {
		if !ph.store[pod] {
			if n == ph.Name {
				elsewhere = append(elsewhere, pod)
			}
			continue
		}
		byWorkload[ph.owner[pod]]++
		if n == ph.Name {
			wrong = append(wrong, pod+" ("+ph.owner[pod]+")")
		}
	}
	ph.mu.Unlock()
	var counts []string
	for w, n := range byWorkload {
		counts = append(counts, fmt.Sprintf("%s %d", w, n))
	}
	sort.Strings(counts)
	sort.Strings(wrong)
	if len(wrong) > 0 {
		t.Errorf("pods that mount the store placed on the phantom node, where nothing runs them: %s", strings.Join(wrong, ", "))
	} else {
		t.Logf("pods that mount the store placed while the phantom node was Ready: %s; none on it", strings.Join(counts, ", "))
	}
	if len(elsewhere) > 0 {
		sort.Strings(elsewhere)
		t.Logf("pods of reflector-system without the store placed on the phantom node: %s", strings.Join(elsewhere, ", "))
	}
	ph.removed = true
	if err := ph.Stop(ctx); err != nil {
		t.Errorf("removing the phantom node: %v", err)
	}
}
