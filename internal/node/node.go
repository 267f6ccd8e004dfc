// Package node runs a single-node Kubernetes cluster on this machine for tests that need pods:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd with runc, the kubelet, bridge CNI,
// kube-proxy (iptables) and CoreDNS, with an image registry for the node, all the real
// programs, built by `make cluster-env` (hack/cluster.sh) and `make testenv`.
//
// Where everything runs: the whole cluster, control plane included, runs inside a network
// namespace that Start makes (Namespaces), at the node address NodeIP on the namespace's
// loopback interface. Pods reach the apiserver as pods of any cluster do: at the kubernetes
// Service's ClusterIP, which kube-proxy translates to NodeIP, a local address of the node's
// namespace, at the end of the pods' bridge. Running the control plane outside (on the host's
// 127.0.0.1) would need a path from the pods' addresses to the host's loopback, that is an
// address of the host outside loopback, which the tests may not bind. This process stays in the
// host's namespaces and reaches the cluster by dialing from a thread that has entered the node's
// network namespace (Namespaces.DialContext): the clients of Env and the registry's listener
// there work that way; programs that a test runs against the cluster (kubectl, ko) run inside
// it through Namespaces.Wrap. So nothing of the cluster listens outside the host's loopback or
// that namespace, and Stop removes the namespace with everything in it.
package node

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
)

const (
	// NodeIP is the node's address inside its network namespace: the apiserver's, the
	// kubelet's and the registry's.
	NodeIP = "10.201.0.1"
	// PodCIDR is the range of the pods' addresses, on the bridge cni0.
	PodCIDR = "10.244.0.0/24"
	// ServiceCIDR is the apiserver's Service range (testenv's).
	ServiceCIDR = "10.0.0.0/24"
	// DNSIP is CoreDNS's ClusterIP.
	DNSIP = "10.0.0.10"
	// NodeName is the node's name.
	NodeName = "node"
	// RegistryPort is the registry's port at NodeIP.
	RegistryPort = 5000
	// StorageClass is the default StorageClass, served by the host-path provisioner.
	StorageClass = "standard"
	// Zone is the node's topology.kubernetes.io/zone, and the zone that each of its volumes
	// requires, as a zonal block volume does: a pod that mounts one may be scheduled to any
	// node of the zone (a PhantomNode too).
	Zone = "zone-a"
	// ZoneLabel is the well-known label of a node's zone.
	ZoneLabel = "topology.kubernetes.io/zone"

	apiServerPort = 6443
)

// Options configure Start.
type Options struct {
	// Dir holds the node's state and the programs' logs; empty means a new temporary directory
	// that Stop removes.
	Dir string
	// BinDir holds the binaries (`make testenv cluster-env`); empty means testenv.BinDir().
	BinDir string
}

// Cluster is a running single-node cluster.
type Cluster struct {
	// Env is the control plane, with admin clients that dial into the node's namespace.
	*testenv.Env
	// NS are the node's namespaces.
	NS *Namespaces
	// Registry is the node's image registry.
	Registry *Registry
	// Dir holds the node's state and logs.
	Dir string
	// Images are the references, at the node's registry, of the images that Start built:
	// "pause", "base" and "coredns".
	Images map[string]string

	bin       string
	cgroup    string
	temporary bool
	tmpfs     []string
	madeDirs  []string
}

// Cgroup is the name of the node's cgroup, in every hierarchy: the kubelet's cgroupRoot.
func (c *Cluster) Cgroup() string { return c.cgroup }

// Clientset returns a typed client of the control plane with admin rights.
func (c *Cluster) Clientset() kubernetes.Interface { return clientset.For(c.Env) }

// Bin returns the path of a program that `make cluster-env` built: kubectl, kubelet and so on.
func (c *Cluster) Bin(name string) string {
	switch name {
	case "traefik", "coredns", "pause":
		return filepath.Join(c.bin, name)
	}
	return filepath.Join(c.bin, "kube-node", name)
}

// Start brings the cluster up and returns once the node is Ready and CoreDNS answers. On
// failure it removes what it made.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	bin := opts.BinDir
	if bin == "" {
		bin = testenv.BinDir()
	}
	c = &Cluster{Dir: opts.Dir, bin: bin, Images: map[string]string{}}
	for _, b := range []string{c.Bin("kube-apiserver"), c.Bin("kubelet"), c.Bin("kube-proxy"), c.Bin("kube-scheduler"), c.Bin("kube-controller-manager"), c.Bin("kubectl"), c.Bin("coredns"), c.Bin("pause")} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("%s not found: run `make cluster-env` to build it (%w)", b, err)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "iptables", "ip", "nsenter", "unshare"} {
		if _, err := lookPath(b); err != nil {
			return nil, fmt.Errorf("%s not found: run `make cluster-env`, which installs the node's Debian packages (%w)", b, err)
		}
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "reflector-node-"); err != nil {
			return nil, err
		}
		c.temporary = true
	}
	defer func() {
		if err != nil {
			if serr := c.Stop(); serr != nil {
				err = fmt.Errorf("%w (and stopping: %v)", err, serr)
			}
			c = nil
		}
	}()
	if c.NS, err = NewNamespaces(ctx); err != nil {
		return c, err
	}
	if err := c.setUpNamespaces(); err != nil {
		return c, err
	}
	if err := c.makeCgroup(); err != nil {
		return c, err
	}
	if err := c.startRegistry(); err != nil {
		return c, err
	}
	if c.Env, err = testenv.Start(ctx, testenv.Options{
		Dir:           filepath.Join(c.Dir, "control"),
		BinDir:        bin,
		APIServer:     c.Bin("kube-apiserver"),
		APIServerPort: apiServerPort,
		EtcdPort:      2379,
		Wrap:          c.NS.Wrap,
		Dial:          c.NS.DialContext,
		Address:       NodeIP,
	}); err != nil {
		return c, fmt.Errorf("starting the control plane: %w", err)
	}
	for _, step := range []func(context.Context) error{
		c.startControllers,
		c.startContainerd,
		c.startKubelet,
		c.startProxy,
		c.startStorage,
		c.startDNS,
	} {
		if err := step(ctx); err != nil {
			return c, err
		}
	}
	return c, nil
}

// setUpNamespaces gives the network namespace its address and puts tmpfs file systems, in the
// mount namespace, over the host paths that containerd 1.6, the CNI plugins, the kubelet and
// the kubelet fix, so that nothing they write there reaches the host.
func (c *Cluster) setUpNamespaces() error {
	if err := c.NS.Run("ip", "link", "set", "lo", "up"); err != nil {
		return err
	}
	if err := c.NS.Run("ip", "addr", "add", NodeIP+"/32", "dev", "lo"); err != nil {
		return err
	}
	// The namespace has no default route: without a route to the Service range, a connection
	// from the node to a ClusterIP fails before kube-proxy's DNAT rules could send it to a pod.
	if err := c.NS.Run("ip", "route", "add", ServiceCIDR, "dev", "lo", "src", NodeIP); err != nil {
		return err
	}
	// /var/lib/cni: the CNI plugins' cache and host-local's addresses; /run/netns: the pods'
	// network namespaces' files; /run/containerd: runc's state; /var/lib/kubelet: the device
	// plugins' socket, which the kubelet puts there whatever its root directory;
	// /var/log/containers: the kubelet's links to the containers' logs.
	for _, dir := range []string{"/var/lib/cni", "/run/netns", "/run/containerd", "/var/lib/kubelet", "/var/log/containers"} {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			c.madeDirs = append(c.madeDirs, dir)
		}
		if err := c.NS.Run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", dir); err != nil {
			return err
		}
		c.tmpfs = append(c.tmpfs, dir)
	}
	return nil
}

// startRegistry serves the node's registry and pushes the images that the node itself needs.
func (c *Cluster) startRegistry() error {
	local, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	inner, err := c.NS.Listen("tcp", net.JoinHostPort(NodeIP, strconv.Itoa(RegistryPort)))
	if err != nil {
		local.Close()
		return fmt.Errorf("the registry's listener in the node: %w", err)
	}
	c.Registry = startRegistry(local, inner)
	pause, err := ProgramImage(nil, c.Bin("pause"), "pause")
	if err != nil {
		return err
	}
	base, err := BaseImage()
	if err != nil {
		return err
	}
	coredns, err := ProgramImage(base, c.Bin("coredns"), "coredns")
	if err != nil {
		return err
	}
	// The pause binary's name carries its version (hack/cluster.sh).
	pauseBin, err := filepath.EvalSymlinks(c.Bin("pause"))
	if err != nil {
		return err
	}
	for _, img := range []struct {
		key, tag string
		image    v1.Image
	}{
		{"pause", strings.TrimPrefix(filepath.Base(pauseBin), "pause-"), pause},
		{"base", "latest", base},
		{"coredns", "latest", coredns},
	} {
		if c.Images[img.key], err = c.Registry.Push(img.image, img.key, img.tag); err != nil {
			return err
		}
	}
	return nil
}

// makeCgroup makes the node's cgroup in every cgroup v1 hierarchy: the kubelet's cgroupRoot,
// under which it puts every pod's, so that Stop finds and removes them all.
func (c *Cluster) makeCgroup() error {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	c.cgroup = "reflector-node-" + hex.EncodeToString(b)
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	for _, root := range roots {
		dir := filepath.Join(root, c.cgroup)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("making the node's cgroup: %w", err)
		}
		if filepath.Base(root) == "cpuset" {
			// A new cpuset has no CPUs and no memory nodes: a process cannot join it.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(root, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cgroupRoots returns the mount points of the cgroup hierarchies (v1 and a hybrid system's v2).
func cgroupRoots() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var roots []string
	for line := range strings.Lines(string(b)) {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 5 {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			roots = append(roots, f[4])
		}
	}
	if len(roots) == 0 {
		return nil, errors.New("no cgroup file system is mounted")
	}
	return roots, nil
}

// waitAPI polls check, which asks the apiserver, until it succeeds.
func waitAPI(ctx context.Context, within time.Duration, check func(context.Context) error) error {
	return testenv.Poll(ctx, within, 250*time.Millisecond, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return check(cctx)
	})
}

// startControllers starts kube-controller-manager and kube-scheduler and waits until the
// service-account controller has made the default ServiceAccounts, without which the
// ServiceAccount admission plugin refuses pods.
func (c *Cluster) startControllers(ctx context.Context) error {
	kc := c.Kubeconfig
	cm, err := c.StartProgram("kube-controller-manager", c.Bin("kube-controller-manager"), nil,
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--root-ca-file="+c.CAFile(),
		"--service-account-private-key-file="+c.ServiceAccountKeyFile(),
		"--use-service-account-credentials=false",
		"--cluster-name=reflector",
		"--v=1",
	)
	if err != nil {
		return err
	}
	sched, err := c.StartProgram("kube-scheduler", c.Bin("kube-scheduler"), nil,
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--v=1",
	)
	if err != nil {
		return err
	}
	for _, ns := range []string{"default", "kube-system"} {
		if err := testenv.WaitReady(ctx, cm, 2*time.Minute, func() error {
			select {
			case <-sched.Exited():
				return testenv.Halt(fmt.Errorf("kube-scheduler exited: see %s", sched.Log()))
			default:
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := c.Clientset().CoreV1().ServiceAccounts(ns).Get(cctx, "default", metav1.GetOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("the default ServiceAccount of %s: %w", ns, err)
		}
	}
	return nil
}

// startContainerd writes containerd's and the CNI's configuration and starts containerd.
func (c *Cluster) startContainerd(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "containerd")
	cni := filepath.Join(c.Dir, "cni")
	for _, d := range []string{dir, cni} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(cni, "10-bridge.conflist"), []byte(fmt.Sprintf(cniConfig, PodCIDR)), 0o600); err != nil {
		return err
	}
	config := fmt.Sprintf(containerdConfig, dir, c.Images["pause"], cni,
		c.Registry.NodeHost, c.Registry.NodeHost)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	p, err := c.StartProgram("containerd", "containerd", nil, "--config="+path)
	if err != nil {
		return err
	}
	return testenv.WaitReady(ctx, p, time.Minute, func() error {
		_, err := os.Stat(c.containerdSocket())
		return err
	})
}

func (c *Cluster) containerdSocket() string {
	return filepath.Join(c.Dir, "containerd", "containerd.sock")
}

// startKubelet writes the kubelet's configuration, starts it and waits until the node is
// Ready.
func (c *Cluster) startKubelet(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "kubelet")
	if err := os.MkdirAll(filepath.Join(dir, "pod-logs"), 0o700); err != nil {
		return err
	}
	config := fmt.Sprintf(kubeletConfig, "/"+c.cgroup, "unix://"+c.containerdSocket(), NodeIP,
		c.CAFile(), DNSIP, filepath.Join(dir, "pod-logs"))
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	p, err := c.StartProgram("kubelet", c.Bin("kubelet"), nil,
		"--config="+path,
		"--kubeconfig="+c.Kubeconfig,
		"--root-dir="+filepath.Join(dir, "root"),
		"--cert-dir="+filepath.Join(dir, "pki"),
		"--hostname-override="+NodeName,
		"--node-ip="+NodeIP,
		"--node-labels="+ZoneLabel+"="+Zone,
		"--v=1",
	)
	if err != nil {
		return err
	}
	return testenv.WaitReady(ctx, p, 3*time.Minute, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := c.Clientset().CoreV1().Nodes().Get(cctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s is not Ready: %s", NodeName, cond.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition", NodeName)
	})
}

// startProxy starts kube-proxy in iptables mode and waits until it has written the kubernetes
// Service's rules.
func (c *Cluster) startProxy(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "kube-proxy")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(proxyConfig, c.Kubeconfig, PodCIDR, NodeName)), 0o600); err != nil {
		return err
	}
	p, err := c.StartProgram("kube-proxy", c.Bin("kube-proxy"), nil, "--config="+path, "--v=1")
	if err != nil {
		return err
	}
	return testenv.WaitReady(ctx, p, time.Minute, func() error {
		rules, err := c.NS.Output("iptables", "-t", "nat", "-S", "KUBE-SERVICES")
		if err != nil {
			return err
		}
		if !strings.Contains(rules, "default/kubernetes:https") {
			return errors.New("kube-proxy has not written the kubernetes Service's rules yet")
		}
		return nil
	})
}

//go:embed coredns.yaml
var corednsManifest string

//go:embed storageclass.yaml
var storageClassManifest string

// Volumes is how many local PersistentVolumes Start offers, and VolumeSize the size each
// declares (a local volume's size is not enforced: it is the node's file system).
const (
	Volumes    = 4
	VolumeSize = "2Gi"
)

// startStorage applies the StorageClass and offers Volumes local PersistentVolumes of it, each a
// directory under the node's directory. Each requires the node's zone, not the node: what the
// scheduler sees is a zonal block volume's affinity, which admits every node of the zone, so a
// test with a PhantomNode in the zone shows where pods that share a volume go when only their
// own affinity keeps them together.
func (c *Cluster) startStorage(ctx context.Context) error {
	if _, err := c.Apply(ctx, "", []byte(storageClassManifest)); err != nil {
		return fmt.Errorf("the StorageClass: %w", err)
	}
	for i := range Volumes {
		name := fmt.Sprintf("local-%d", i)
		dir := filepath.Join(c.Dir, "volumes", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(VolumeSize)},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              StorageClass,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: ZoneLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{Zone}}},
				}}}},
			},
		}
		if _, err := c.Clientset().CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("PersistentVolume %s: %w", name, err)
		}
	}
	return nil
}

// startDNS applies CoreDNS and waits until it answers at DNSIP.
func (c *Cluster) startDNS(ctx context.Context) error {
	manifest := strings.NewReplacer("COREDNS_IMAGE", c.Images["coredns"], "DNS_IP", DNSIP).Replace(corednsManifest)
	if _, err := c.Apply(ctx, "kube-system", []byte(manifest)); err != nil {
		return fmt.Errorf("CoreDNS: %w", err)
	}
	return waitAPI(ctx, 3*time.Minute, func(ctx context.Context) error {
		addrs, err := c.Resolver().LookupHost(ctx, "kubernetes.default.svc.cluster.local.")
		if err != nil {
			return c.podTrouble(ctx, "kube-system", metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"}, err)
		}
		if len(addrs) != 1 || addrs[0] != "10.0.0.1" {
			return fmt.Errorf("kubernetes.default.svc.cluster.local is %v, want 10.0.0.1", addrs)
		}
		return nil
	})
}

// Resolver asks CoreDNS, at its ClusterIP, from inside the node's network namespace.
func (c *Cluster) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return c.NS.DialContext(ctx, network, net.JoinHostPort(DNSIP, "53"))
	}}
}

// podTrouble adds to err what the pods that selector selects wait for.
func (c *Cluster) podTrouble(ctx context.Context, namespace string, selector metav1.ListOptions, err error) error {
	pods, lerr := c.Clientset().CoreV1().Pods(namespace).List(ctx, selector)
	if lerr != nil {
		return err
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "; pod %s: %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " (%s: %s %s)", cs.Name, w.Reason, w.Message)
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				fmt.Fprintf(&b, " (%s: %s)", cond.Type, cond.Message)
			}
		}
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// WaitPod waits until the pod is Running and its containers are ready.
func (c *Cluster) WaitPod(ctx context.Context, namespace, name string, within time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := waitAPI(ctx, within, func(ctx context.Context) error {
		p, err := c.Clientset().CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if p.Status.Phase != corev1.PodRunning {
			return c.podTrouble(ctx, namespace, metav1.ListOptions{FieldSelector: "metadata.name=" + name}, fmt.Errorf("pod %s is %s", name, p.Status.Phase))
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("pod %s is not ready", name)
	})
	return pod, err
}

// Stop stops the cluster and removes the node's namespaces with everything in them, its cgroup
// and, when Start made it, its directory. It also cleans up after a Start that failed midway.
func (c *Cluster) Stop() error {
	var errs []error
	if c.Env != nil {
		errs = append(errs, c.Env.Stop())
	}
	if c.cgroup != "" {
		errs = append(errs, removeCgroup(c.cgroup))
	}
	if c.NS != nil {
		errs = append(errs, c.NS.Close())
	}
	if c.Registry != nil {
		c.Registry.close()
	}
	for _, d := range c.madeDirs {
		_ = os.Remove(d)
	}
	if c.temporary {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

// removeCgroup kills every process in the cgroup name of every hierarchy (the containers, which
// run in namespaces of their own) and removes the cgroup with every cgroup below it.
func removeCgroup(name string) error {
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	err = testenv.Poll(context.Background(), 10*time.Second, 100*time.Millisecond, func() error {
		left := 0
		for _, root := range roots {
			_ = filepath.WalkDir(filepath.Join(root, name), func(path string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
				if err != nil {
					return nil
				}
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						left++
						_ = killPid(pid)
					}
				}
				return nil
			})
		}
		if left > 0 {
			return fmt.Errorf("%d processes in the node's cgroup", left)
		}
		return nil
	})
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(root, name), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		// Children first.
		for i := len(dirs) - 1; i >= 0; i-- {
			if rerr := os.Remove(dirs[i]); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}
	return err
}
