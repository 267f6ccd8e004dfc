package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/node"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestNodeIntegration brings the single-node cluster up (which waits for the node to be Ready
// and for CoreDNS, in a pod pulled from the node's registry, to answer through kube-proxy's
// ClusterIP from the apiserver's data), runs a pod with a claim that binds one of the node's local
// volumes, writable by the pod's non-root user through its fsGroup, checks that no program of the node runs outside its network namespace, and that Stop
// leaves no process, cgroup or namespace behind.
func TestNodeIntegration(t *testing.T) {
	if os.Getenv("REFLECTOR_CLUSTER_TEST") == "" {
		t.Skip("starts a single-node cluster in a network namespace, as root: make cluster-test (REFLECTOR_CLUSTER_TEST=1)")
	}
	ctx := context.Background()
	start := time.Now()
	c, err := node.Start(ctx, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			if err := c.Stop(); err != nil {
				t.Errorf("stopping the cluster: %v", err)
			}
		}
	})
	t.Logf("the cluster was up in %s", time.Since(start).Round(time.Second))

	kube := c.Clientset()
	nonRoot := int64(node.NonRoot)
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}
	if _, err := kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: "default"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &nonRoot, RunAsGroup: &nonRoot, FSGroup: &nonRoot},
			Containers: []corev1.Container{{
				Name:         "pause",
				Image:        c.Images["pause"],
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}},
		},
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, err := c.WaitPod(ctx, "default", "holder", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ip := running.Status.PodIP; !strings.HasPrefix(ip, "10.244.0.") {
		t.Errorf("the pod's address is %q, want one of %s", ip, node.PodCIDR)
	}
	// The kubelet's and containerd's logs tell the steps of the start, in order.
	ps, err := c.PodStart("default", "holder")
	if err != nil {
		t.Fatal(err)
	}
	if ps.Mounted.IsZero() || !ps.Sandbox.After(ps.Mounted) || !ps.Started["pause"].After(ps.Sandbox) {
		t.Errorf("the pod's start from the logs: volumes %s, sandbox %s, container %s; want them in this order",
			ps.Mounted, ps.Sandbox, ps.Started["pause"])
	}
	bound, err := kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bound.Status.Phase != corev1.ClaimBound || bound.Spec.StorageClassName == nil || *bound.Spec.StorageClassName != node.StorageClass {
		t.Errorf("claim: phase %s, class %v; want Bound by %s", bound.Status.Phase, bound.Spec.StorageClassName, node.StorageClass)
	}
	// The kubelet gave the volume to the pod's fsGroup: group-owned, group-writable, setgid.
	pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, bound.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local == nil {
		t.Fatalf("volume %s is not a local volume: %+v", pv.Name, pv.Spec.PersistentVolumeSource)
	}
	fi, err := os.Stat(pv.Spec.Local.Path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Gid != uint32(node.NonRoot) || fi.Mode()&0o020 == 0 || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("volume %s: gid %d, mode %s; want the pod's fsGroup %d, group-writable, setgid", pv.Spec.Local.Path, st.Gid, fi.Mode(), node.NonRoot)
	}

	// Nothing of the node runs in the host's network namespace, and this process, which serves
	// the registry on the host's side, listens on loopback only.
	pids := c.NS.Pids()
	if len(pids) < 8 {
		t.Errorf("only %d processes in the node's namespaces", len(pids))
	}
	for _, pid := range pids {
		if !c.NS.InNetwork(pid) {
			comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
			t.Errorf("process %d (%s) runs outside the node's network namespace", pid, strings.TrimSpace(string(comm)))
		}
	}
	own, err := testenv.Listeners(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if out := testenv.NonLoopback(own); len(out) > 0 {
		t.Errorf("the test process listens beyond loopback: %v", out)
	}

	netns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("stopping the cluster: %v", err)
	}
	for _, pid := range pids {
		if id, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && id == netns {
			t.Errorf("process %d of the node outlived Stop", pid)
		}
	}
	if _, err := os.Stat(c.Dir); err == nil {
		t.Errorf("Stop left the node's directory %s", c.Dir)
	}
	if left, err := filepath.Glob("/sys/fs/cgroup/*/" + c.Cgroup()); err != nil || len(left) > 0 {
		t.Errorf("Stop left cgroups: %v %v", left, err)
	}
}

// TestNodeStartFailureIntegration makes Start fail midway, with a kube-scheduler that exits at
// once, and checks that it says why and leaves no process, cgroup or directory behind.
func TestNodeStartFailureIntegration(t *testing.T) {
	if os.Getenv("REFLECTOR_CLUSTER_TEST") == "" {
		t.Skip("starts a single-node cluster in a network namespace, as root: make cluster-test (REFLECTOR_CLUSTER_TEST=1)")
	}
	real := testenv.BinDir()
	bin := t.TempDir()
	for _, name := range []string{"etcd", "coredns", "pause"} {
		if err := os.Symlink(filepath.Join(real, name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(bin, "kube-node"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kube-apiserver", "kubelet", "kube-proxy", "kube-controller-manager", "kubectl"} {
		if err := os.Symlink(filepath.Join(real, "kube-node", name), filepath.Join(bin, "kube-node", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/bin/false", filepath.Join(bin, "kube-node", "kube-scheduler")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "node")
	before, _ := filepath.Glob("/sys/fs/cgroup/*/reflector-node-*")
	_, err := node.Start(context.Background(), node.Options{Dir: dir, BinDir: bin})
	if err == nil || !strings.Contains(err.Error(), "kube-scheduler exited") {
		t.Fatalf("Start with a kube-scheduler that exits: %v, want an error that says so", err)
	}
	if children := childProcesses(t); len(children) > 0 {
		t.Errorf("processes left after a failed Start: %v", children)
	}
	if after, _ := filepath.Glob("/sys/fs/cgroup/*/reflector-node-*"); len(after) > len(before) {
		t.Errorf("cgroups left after a failed Start: %v", after)
	}
}

// childProcesses returns the commands of this process's children.
func childProcesses(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) && f[0] != "Z" {
			out = append(out, e.Name()+" "+s[strings.IndexByte(s, '(')+1:i])
		}
	}
	return out
}
