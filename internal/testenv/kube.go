// Package testenv starts the real parts that reflector integrates with, on 127.0.0.1: etcd and
// kube-apiserver with reflector's CRDs installed, and an OCI registry. Integration tests share one
// environment per test binary through Main and Kube; `make run` starts the same environment
// through Start.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/imagereflector/reflector/internal/kube"
)

// Env is a running etcd and kube-apiserver pair with reflector's CRDs installed.
type Env struct {
	// Config is an admin (system:masters) client configuration for the apiserver.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the same admin credentials.
	Kubeconfig string
	// Dir holds the environment's state: certificates, etcd data and the processes' logs.
	Dir string
	// APIServerURL is the apiserver's https address.
	APIServerURL string

	clientset kubernetes.Interface
	dynamic   dynamic.Interface
	procs     []*exec.Cmd
	// programs run against the apiserver (Knative's); Stop stops them together, first.
	programs  []*exec.Cmd
	temporary bool
}

// Options configure Start.
type Options struct {
	// Dir holds the state. A directory that an earlier Start used is reused: its etcd data and
	// certificates survive, so objects and kubeconfigs do too. Empty means a new temporary
	// directory that Stop removes.
	Dir string
	// BinDir holds the etcd and kube-apiserver binaries; empty means BinDir().
	BinDir string
	// APIServerPort and EtcdPort fix the ports; zero picks free ones.
	APIServerPort, EtcdPort int
}

// BinDir returns where `make testenv` (hack/testenv.sh) leaves the etcd and kube-apiserver
// binaries: $REFLECTOR_TESTENV_BIN, else $REFLECTOR_CACHE/bin, else ~/.cache/reflector/bin.
func BinDir() string {
	if d := os.Getenv("REFLECTOR_TESTENV_BIN"); d != "" {
		return d
	}
	cache := os.Getenv("REFLECTOR_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cache = filepath.Join(base, "reflector")
	}
	return filepath.Join(cache, "bin")
}

// Start starts etcd and kube-apiserver, waits until the apiserver is ready and installs the CRDs.
func Start(ctx context.Context, opts Options) (env *Env, err error) {
	bin := opts.BinDir
	if bin == "" {
		bin = BinDir()
	}
	etcdBin, apiBin := filepath.Join(bin, "etcd"), filepath.Join(bin, "kube-apiserver")
	for _, b := range []string{etcdBin, apiBin} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("%s not found: run `make testenv` to build it (%w)", b, err)
		}
	}
	dir, temporary := opts.Dir, opts.Dir == ""
	if temporary {
		if dir, err = os.MkdirTemp("", "reflector-testenv-"); err != nil {
			return nil, err
		}
	}
	env = &Env{Dir: dir, temporary: temporary}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()
	p, err := ensurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("writing certificates: %w", err)
	}
	etcdPort, err := portOr(opts.EtcdPort)
	if err != nil {
		return nil, err
	}
	peerPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	if err := env.startProcess(ctx, "etcd", etcdBin,
		"--name=reflector",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-advertise-peer-urls=http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-cluster=reflector=http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--listen-metrics-urls=",
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 30*time.Second, "etcd", filepath.Join(dir, "etcd.log"), func() error {
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health answered %s", resp.Status)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	apiPort, err := portOr(opts.APIServerPort)
	if err != nil {
		return nil, err
	}
	env.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := env.startProcess(ctx, "kube-apiserver", apiBin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		// 1.37 refuses a loopback advertise address unless no endpoint reconciler runs.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(dir, "pki"),
		"--tls-cert-file="+p.servingCert,
		"--tls-private-key-file="+p.servingKey,
		"--client-ca-file="+p.caCert,
		"--service-account-issuer="+env.APIServerURL,
		"--service-account-key-file="+p.saKey,
		"--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount",
		"--storage-media-type=application/json",
		"--v=0",
	); err != nil {
		return nil, err
	}
	env.Config = &rest.Config{
		Host: env.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   p.caCert,
			CertFile: p.adminCert,
			KeyFile:  p.adminKey,
		},
		QPS:   1000,
		Burst: 2000,
	}
	if env.clientset, err = kubernetes.NewForConfig(env.Config); err != nil {
		return nil, err
	}
	if env.dynamic, err = dynamic.NewForConfig(env.Config); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 60*time.Second, "kube-apiserver", filepath.Join(dir, "kube-apiserver.log"), func() error {
		body, err := env.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if env.Kubeconfig, err = env.writeKubeconfig(p); err != nil {
		return nil, err
	}
	if err := env.InstallCRDs(ctx); err != nil {
		return nil, fmt.Errorf("installing CRDs: %w", err)
	}
	return env, nil
}

// Clientset returns a typed client with admin rights.
func (e *Env) Clientset() kubernetes.Interface { return e.clientset }

// Dynamic returns a dynamic client with admin rights.
func (e *Env) Dynamic() dynamic.Interface { return e.dynamic }

// Stop stops the programs started against the apiserver (StartKnative's), then kube-apiserver
// and etcd, in that order, and removes a temporary state directory.
func (e *Env) Stop() error {
	var wg sync.WaitGroup
	for _, cmd := range e.programs {
		// Knative's webhooks keep serving for a drain period (45 s) after SIGTERM, for the
		// endpoints of a Service to move on; nothing here needs that.
		wg.Go(func() { stopProcess(cmd, time.Second) })
	}
	wg.Wait()
	e.programs = nil
	for i := len(e.procs) - 1; i >= 0; i-- {
		stopProcess(e.procs[i], 10*time.Second)
	}
	e.procs = nil
	if e.temporary {
		return os.RemoveAll(e.Dir)
	}
	return nil
}

// stopProcess sends SIGTERM, and SIGKILL after grace, and waits for the process to exit.
func stopProcess(cmd *exec.Cmd, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (e *Env) startProcess(ctx context.Context, name, bin string, args ...string) error {
	cmd, err := e.startProcessEnv(name, bin, nil, args...)
	if err == nil {
		e.procs = append(e.procs, cmd)
	}
	return err
}

// startProgram starts a program that runs against the apiserver, with the environment environ;
// Stop stops it before the apiserver.
func (e *Env) startProgram(name, bin string, environ []string, args ...string) error {
	cmd, err := e.startProcessEnv(name, bin, environ, args...)
	if err == nil {
		e.programs = append(e.programs, cmd)
	}
	return err
}

// startProcessEnv starts bin with the environment environ (nil: this process's), logging to
// <Dir>/<name>.log.
func (e *Env) startProcessEnv(name, bin string, environ []string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The processes must not outlive a test binary that dies without calling Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return cmd, nil
}

func (e *Env) writeKubeconfig(p *pki) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["reflector"] = &clientcmdapi.Cluster{Server: e.APIServerURL, CertificateAuthority: p.caCert}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: p.adminCert, ClientKey: p.adminKey}
	cfg.Contexts["reflector"] = &clientcmdapi.Context{Cluster: "reflector", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "reflector"
	path := filepath.Join(e.Dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// waitFor polls check until it succeeds, the timeout passes or ctx ends; a failure carries the
// end of the process's log.
func waitFor(ctx context.Context, timeout time.Duration, what, logPath string, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %s: %v\n%s", what, timeout, last, tail(logPath, 20))
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func portOr(p int) (int, error) {
	if p != 0 {
		return p, nil
	}
	return FreePort()
}

// FreePort returns a free port below the ephemeral range (32768 on Linux), where no closing
// client connection can hold it.
func FreePort() (int, error) {
	for range 100 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("no free port found between 20000 and 32000")
}

// Client returns a client of reflector's for the environment's apiserver.
func (e *Env) Client(t testing.TB) *kube.Client {
	t.Helper()
	c, err := kube.New(e.Config)
	if err != nil {
		t.Fatalf("kubernetes client: %v", err)
	}
	return c
}
