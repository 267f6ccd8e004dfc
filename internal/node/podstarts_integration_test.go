package node_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/imagereflector/reflector/internal/node"
)

// podStarts records, from a watch on the functions' pods, when this process saw each pod
// created, scheduled and ready: the pod's own timestamps have whole-second resolution. The
// steps between come from the node's logs (node.Cluster.PodStart, FirstRequest).
type podStarts struct {
	seen map[string]*podStart
}

type podStart struct {
	service, name             string
	created, scheduled, ready time.Time
	// unschedulable is the scheduler's reason while the pod waited for a node, if it did.
	unschedulable string
}

func watchPodStarts(ctx context.Context, t *testing.T, c *node.Cluster) (*podStarts, func()) {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	w, err := c.Clientset().CoreV1().Pods("reflector-system").Watch(wctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service"})
	if err != nil {
		t.Fatal(err)
	}
	ps := &podStarts{seen: map[string]*podStart{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			s := ps.seen[pod.Name]
			if s == nil {
				if ev.Type != watch.Added || pod.Spec.NodeName != "" {
					// A pod from before the watch, on its way out.
					continue
				}
				s = &podStart{service: pod.Labels["serving.knative.dev/service"], name: pod.Name, created: now}
				ps.seen[pod.Name] = s
			}
			if s.scheduled.IsZero() && pod.Spec.NodeName != "" {
				s.scheduled = now
			}
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && s.unschedulable == "" {
					s.unschedulable = cond.Reason + ": " + cond.Message
				}
			}
			if s.ready.IsZero() {
				for _, cond := range pod.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						s.ready = now
					}
				}
			}
		}
	}()
	return ps, func() { cancel(); w.Stop(); <-done }
}

// The steps of a pod's start, in order.
var startSteps = []string{"schedule", "volumes", "sandbox", "containers", "ready", "first request arrives", "first request"}

// steps returns, for the first pod of each Service that the round started, how long each step
// of its start took:
//   - schedule: from the pod's creation to its node being set (the watch);
//   - volumes: from then to the kubelet's last "MountVolume.SetUp succeeded" for it (this
//     includes the kubelet's noticing the pod);
//   - sandbox: to containerd's RunPodSandbox returning (pause container, CNI address);
//   - containers: to the last of its containers started (containerd's StartContainer);
//   - ready: to the pod's Ready condition (the watch; the kubelet's readiness probe through the
//     queue-proxy). It is not on the request's path: the activator probes the pod itself and
//     sends as soon as it answers, so a pod can serve before the kubelet calls it Ready, and
//     a Ready that the round did not see is left out;
//   - first request arrives: from the containers' start to the first request reaching the
//     queue-proxy (Knative's request log);
//   - first request: how long that request took, as the queue-proxy measured it.
//
// extra lists the round's other pods, with the first request each served: starts that the
// push caused beyond one per Service.
func (ps *podStarts) steps(c *node.Cluster) (steps map[string]map[string]time.Duration, extra []string, err error) {
	first := map[string]*podStart{}
	var all []*podStart
	for _, s := range ps.seen {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].created.Before(all[j].created) })
	for _, s := range all {
		if first[s.service] == nil {
			first[s.service] = s
			continue
		}
		r, ok, err := c.FirstRequest("reflector-system", s.name, "queue-proxy")
		what := "no request"
		if err != nil {
			what = err.Error()
		} else if ok {
			what = fmt.Sprintf("first request %s (%d)", r.URL, r.Status)
		}
		extra = append(extra, fmt.Sprintf("%s +%s: %s", s.service, ms(s.created.Sub(first[s.service].created)), what))
	}
	steps = map[string]map[string]time.Duration{}
	for svc, s := range first {
		if s.scheduled.IsZero() {
			return nil, nil, fmt.Errorf("pod %s of %s was not scheduled within the round", s.name, svc)
		}
		l, err := c.PodStart("reflector-system", s.name)
		if err != nil {
			return nil, nil, err
		}
		var started time.Time
		for _, t := range l.Started {
			if t.After(started) {
				started = t
			}
		}
		if l.Mounted.IsZero() || l.Sandbox.IsZero() || len(l.Started) < 2 {
			return nil, nil, fmt.Errorf("pod %s: the logs have volumes %s, sandbox %s, containers %v", s.name, l.Mounted, l.Sandbox, l.Started)
		}
		r, ok, err := c.FirstRequest("reflector-system", s.name, "queue-proxy")
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, fmt.Errorf("pod %s: its queue-proxy logged no request", s.name)
		}
		steps[svc] = map[string]time.Duration{
			"schedule":              s.scheduled.Sub(s.created),
			"volumes":               l.Mounted.Sub(s.scheduled),
			"sandbox":               l.Sandbox.Sub(l.Mounted),
			"containers":            started.Sub(l.Sandbox),
			"first request arrives": r.Start().Sub(started),
			"first request":         r.Latency,
		}
		if !s.ready.IsZero() {
			steps[svc]["ready"] = s.ready.Sub(started)
		}
	}
	return steps, extra, nil
}

// created returns when the first pod of service was seen created, or zero.
func (ps *podStarts) created(service string) time.Time {
	var t time.Time
	for _, s := range ps.seen {
		if s.service == service && (t.IsZero() || s.created.Before(t)) {
			t = s.created
		}
	}
	return t
}

// formatSteps writes one Service's steps on a line.
func formatSteps(steps map[string]time.Duration) string {
	var out []string
	for _, name := range startSteps {
		if d, ok := steps[name]; ok {
			out = append(out, fmt.Sprintf("%s %s", name, ms(d)))
		} else {
			out = append(out, name+" not seen")
		}
	}
	return strings.Join(out, ", ")
}

// startTable collects the steps of many rounds and summarizes them by Service and step.
type startTable map[string]map[string][]time.Duration

func (st startTable) add(round map[string]map[string]time.Duration) {
	for svc, steps := range round {
		if st[svc] == nil {
			st[svc] = map[string][]time.Duration{}
		}
		for name, d := range steps {
			st[svc][name] = append(st[svc][name], d)
		}
	}
}

func (st startTable) String() string {
	var svcs []string
	for svc := range st {
		svcs = append(svcs, svc)
	}
	sort.Strings(svcs)
	var b strings.Builder
	for _, svc := range svcs {
		fmt.Fprintf(&b, "\n  %s (%d starts):", svc, len(st[svc]["schedule"]))
		for _, name := range startSteps {
			ds := st[svc][name]
			if len(ds) == 0 {
				continue
			}
			fmt.Fprintf(&b, " %s p50 %s max %s", name, ms(percentile(ds, 50)), ms(percentile(ds, 100)))
			if n := len(st[svc]["schedule"]); len(ds) < n {
				fmt.Fprintf(&b, " (%d of %d)", len(ds), n)
			}
			b.WriteString(";")
		}
	}
	return b.String()
}

// unschedulable returns the scheduler's reasons for the round's pods that waited for a node.
func (ps *podStarts) unschedulable() []string {
	var out []string
	if ps == nil {
		return nil
	}
	for _, s := range ps.seen {
		if s.unschedulable != "" {
			out = append(out, s.name+": "+s.unschedulable)
		}
	}
	sort.Strings(out)
	return out
}

// count returns how many pods of each Service the round started.
func (ps *podStarts) count() map[string]int {
	n := map[string]int{}
	for _, s := range ps.seen {
		n[s.service]++
	}
	return n
}
