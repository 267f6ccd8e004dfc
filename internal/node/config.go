package node

import (
	"os/exec"
	"path/filepath"
	"syscall"
)

// containerdConfig is containerd 1.6's configuration (version 2): its state under the node's
// directory (root, state, socket: %[1]s), the CRI plugin with overlayfs, runc with cgroupfs, the
// pause image (%[2]s), the CNI configuration directory (%[3]s) and the node's registry over
// plain HTTP (%[4]s, %[5]s). restrict_oom_score_adj: the kubelet asks for OOM scores below
// containerd's own, which a process without CAP_SYS_RESOURCE may not set. No metrics, debug or
// stream server listens beyond the namespace's loopback.
const containerdConfig = `version = 2
root = "%[1]s/root"
state = "%[1]s/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "%[1]s/containerd.sock"

[ttrpc]
  address = "%[1]s/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "%[1]s/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%[2]s"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "%[3]s"

[plugins."io.containerd.grpc.v1.cri".registry.mirrors."%[4]s"]
  endpoint = ["http://%[5]s"]
`

// cniConfig is the pods' network: a bridge with the node's side as the gateway, addresses from
// PodCIDR (%s) by host-local, and portmap for hostPort.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "reflector-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "%s"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// kubeletConfig is the kubelet's configuration: cgroup v1 allowed, cgroupfs under the node's
// cgroup (%[1]s), containerd's socket (%[2]s), its server on the node's address (%[3]s) with
// client certificates of the cluster's CA (%[4]s), the cluster's DNS (%[5]s), the pods' logs
// (%[6]s), no host resolv.conf (the node has no upstream), and evictions only when the disk or
// memory is all but full, since the machine's other work shares them.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: %[2]s
address: %[3]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[4]s
authorization:
  mode: AlwaysAllow
clusterDNS: [%[5]s]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: %[6]s
serializeImagePulls: false
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

// proxyConfig is kube-proxy's configuration: iptables, the admin kubeconfig (%[1]s), the pods'
// range (%[2]s), the node's name (%[3]s), its servers on loopback, and no conntrack sysctl
// (the network namespace has its own table, sized by the host).
const proxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]s
clusterCIDR: %[2]s
hostnameOverride: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`

// lookPath finds a program on PATH or in the sbin directories, which a test's PATH may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
