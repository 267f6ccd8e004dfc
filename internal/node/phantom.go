package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PhantomNode is a Node object with no kubelet behind it, in the node's zone, that this process
// keeps Ready: it renews the node's Lease and the heartbeat of its conditions, as a kubelet
// does, so that kube-controller-manager neither marks it NotReady nor taints it. The scheduler
// sees a second node, empty and so the one its scoring prefers; a pod bound to it is never run
// and stays Pending. A test registers one to see which pods may go elsewhere than the real node.
type PhantomNode struct {
	// Name is the Node's name.
	Name string

	c      *Cluster
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// phantomRenew is how often the Lease and the conditions' heartbeat are renewed: well inside
// kube-controller-manager's node-monitor-grace-period (40 s or more).
const phantomRenew = 5 * time.Second

// StartPhantomNode registers the Node name, Ready, with the capacity of a small node, and keeps
// it Ready until Stop.
func (c *Cluster) StartPhantomNode(ctx context.Context, name string) (*PhantomNode, error) {
	kube := c.Clientset()
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
			ZoneLabel:                Zone,
		}},
		// A Node's status may be set when it is created.
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Conditions:  phantomConditions(now),
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
		},
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("the phantom node %s: %w", name, err)
	}
	holder, duration := name, int32(40)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &duration,
			RenewTime:            &metav1.MicroTime{Time: now.Time},
		},
	}
	if _, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		_ = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		return nil, fmt.Errorf("the phantom node's Lease: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	p := &PhantomNode{Name: name, c: c, cancel: cancel, done: make(chan struct{})}
	go p.renew(rctx)
	return p, nil
}

func phantomConditions(now metav1.Time) []corev1.NodeCondition {
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
	}
}

// renew renews the Lease and the conditions' heartbeat until ctx ends; the first failure is
// kept for Err.
func (p *PhantomNode) renew(ctx context.Context) {
	defer close(p.done)
	kube := p.c.Clientset()
	tick := time.NewTicker(phantomRenew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, phantomRenew)
			defer cancel()
			l, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(cctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			if _, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(cctx, l, metav1.UpdateOptions{}); err != nil {
				return err
			}
			n, err := kube.CoreV1().Nodes().Get(cctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			for i := range n.Status.Conditions {
				n.Status.Conditions[i].LastHeartbeatTime = now
			}
			_, err = kube.CoreV1().Nodes().UpdateStatus(cctx, n, metav1.UpdateOptions{})
			return err
		}()
		if err != nil && ctx.Err() == nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = fmt.Errorf("keeping the phantom node %s Ready: %w", p.Name, err)
			}
			p.mu.Unlock()
		}
	}
}

// Err returns the first failure to renew the node, if any.
func (p *PhantomNode) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Ready tells whether the Node is Ready and untainted, as the scheduler sees it.
func (p *PhantomNode) Ready(ctx context.Context) error {
	n, err := p.c.Clientset().CoreV1().Nodes().Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(n.Spec.Taints) > 0 || n.Spec.Unschedulable {
		return fmt.Errorf("the phantom node %s is tainted or unschedulable: %v", p.Name, n.Spec.Taints)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			return fmt.Errorf("the phantom node %s is not Ready: %s %s", p.Name, cond.Status, cond.Reason)
		}
	}
	return nil
}

// Stop stops renewing and deletes the Node and its Lease; kube-controller-manager then removes
// the pods bound to it.
func (p *PhantomNode) Stop(ctx context.Context) error {
	p.cancel()
	<-p.done
	kube := p.c.Clientset()
	err := kube.CoreV1().Nodes().Delete(ctx, p.Name, metav1.DeleteOptions{})
	if lerr := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, p.Name, metav1.DeleteOptions{}); err == nil {
		err = lerr
	}
	return err
}
