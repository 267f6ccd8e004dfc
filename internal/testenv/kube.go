// Package testenv starts the real parts that reflector integrates with, on 127.0.0.1: etcd and
// kube-apiserver with reflector's CRDs installed, and an OCI registry. Integration tests share one
// environment per test binary through Main and Kube; `make run` starts the same environment
// through Start.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
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

	// admin is an HTTP client with the admin credentials, for the requests that no typed
	// client makes: readiness and discovery. client-go's clientset and discovery client would
	// link every API group's types into every test binary that starts an apiserver; tests that
	// need the clientset take it from package clientset.
	admin   *http.Client
	dynamic dynamic.Interface
	pki     *pki
	wrap    func(argv []string) []string
	probe   *http.Client
	procs   []*process
	// programs run against the apiserver (Knative's); Stop stops them together, first.
	programs  []*process
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
	// APIServer, when set, is the kube-apiserver binary to run instead of BinDir's.
	APIServer string
	// APIServerPort and EtcdPort fix the ports; zero picks free ones.
	APIServerPort, EtcdPort int
	// Wrap, when set, changes each program's command line (the binary first) before it starts:
	// internal/node runs the programs inside the network namespace of a node this way.
	Wrap func(argv []string) []string
	// Dial, when set, is how this process connects to the programs: its clients' and probes'
	// dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Address, when set, is the address that kube-apiserver binds and advertises instead of
	// 127.0.0.1, and is in its serving certificate. The apiserver then runs as a cluster's does:
	// with the ServiceAccount admission plugin, and with the endpoint reconciler that points the
	// kubernetes Service at it. etcd stays on 127.0.0.1.
	Address string
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
	if opts.APIServer != "" {
		apiBin = opts.APIServer
	}
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
	env = &Env{Dir: dir, temporary: temporary, wrap: opts.Wrap, probe: probe}
	if opts.Dial != nil {
		env.probe = &http.Client{Timeout: probe.Timeout, Transport: &http.Transport{DialContext: opts.Dial}}
	}
	// The error returns set env to nil: stop what was started through a copy.
	started := env
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	var ips []net.IP
	if opts.Address != "" {
		ip := net.ParseIP(opts.Address)
		if ip == nil {
			return nil, fmt.Errorf("address %q is not an IP address", opts.Address)
		}
		ips = append(ips, ip)
	}
	p, err := ensurePKI(filepath.Join(dir, "pki"), ips...)
	if err != nil {
		return nil, fmt.Errorf("writing certificates: %w", err)
	}
	env.pki = p
	etcdURL, err := env.startEtcd(ctx, etcdBin, opts.EtcdPort)
	if err != nil {
		return nil, err
	}
	if err := env.startAPIServer(ctx, apiBin, etcdURL, opts, p); err != nil {
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

// startEtcd starts etcd on port (zero: one PortForProcess picks, again if it was taken) and
// waits until it is healthy; it returns etcd's client URL.
func (e *Env) startEtcd(ctx context.Context, bin string, port int) (string, error) {
	var url string
	return url, RetryPorts(func() error {
		clientPort, err := portOr(port)
		if err != nil {
			return err
		}
		peerPort, err := pickPort()
		if err != nil {
			return err
		}
		url = "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		proc, err := e.startProcess("etcd", bin, nil,
			"--name=reflector",
			"--data-dir="+filepath.Join(e.Dir, "etcd"),
			"--listen-client-urls="+url,
			"--advertise-client-urls="+url,
			"--listen-peer-urls="+peer,
			"--initial-advertise-peer-urls="+peer,
			"--initial-cluster=reflector="+peer,
			"--listen-metrics-urls=",
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		)
		if err != nil {
			return err
		}
		return e.waitStarted(ctx, proc, 30*time.Second, port != 0, func() error {
			resp, err := e.probe.Get(url + "/health")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("etcd /health answered %s", resp.Status)
			}
			return nil
		})
	})
}

// startAPIServer starts kube-apiserver on opts.Address (empty: 127.0.0.1) and
// opts.APIServerPort (zero: one PortForProcess picks, again if it was taken) against etcdURL,
// sets e's URL, clients and configuration (dialing with opts.Dial when not nil), and waits until
// it is ready.
func (e *Env) startAPIServer(ctx context.Context, bin, etcdURL string, opts Options, p *pki) error {
	port, address, dial := opts.APIServerPort, opts.Address, opts.Dial
	// 1.37 refuses a loopback advertise address unless no endpoint reconciler runs; a test
	// apiserver without pods needs no ServiceAccount admission (it would wait for each
	// namespace's default ServiceAccount).
	mode := []string{"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount"}
	if address != "" {
		// The kubelet's address, not its node name, which no DNS resolves; the admin
		// certificate, of the cluster's CA, is the apiserver's credential at the kubelet (logs,
		// exec, port-forward).
		mode = []string{"--advertise-address=" + address, "--kubelet-preferred-address-types=InternalIP",
			"--kubelet-client-certificate=" + p.adminCert, "--kubelet-client-key=" + p.adminKey}
	} else {
		address = "127.0.0.1"
	}
	return RetryPorts(func() error {
		apiPort, err := portOr(port)
		if err != nil {
			return err
		}
		e.APIServerURL = "https://" + net.JoinHostPort(address, strconv.Itoa(apiPort))
		args := append([]string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=" + address,
			"--secure-port=" + strconv.Itoa(apiPort),
		}, mode...)
		proc, err := e.startProcess("kube-apiserver", bin, nil, append(args,
			"--cert-dir="+filepath.Join(e.Dir, "pki"),
			"--tls-cert-file="+p.servingCert,
			"--tls-private-key-file="+p.servingKey,
			"--client-ca-file="+p.caCert,
			"--service-account-issuer="+e.APIServerURL,
			"--service-account-key-file="+p.saKey,
			"--service-account-signing-key-file="+p.saKey,
			"--service-cluster-ip-range=10.0.0.0/24",
			"--authorization-mode=RBAC",
			"--allow-privileged=true",
			"--storage-media-type=application/json",
			"--v=0",
		)...)
		if err != nil {
			return err
		}
		e.Config = &rest.Config{
			Host: e.APIServerURL,
			TLSClientConfig: rest.TLSClientConfig{
				CAFile:   p.caCert,
				CertFile: p.adminCert,
				KeyFile:  p.adminKey,
			},
			QPS:   1000,
			Burst: 2000,
			Dial:  dial,
		}
		if e.admin, err = rest.HTTPClientFor(e.Config); err != nil {
			return err
		}
		if e.dynamic, err = dynamic.NewForConfig(e.Config); err != nil {
			return err
		}
		return e.waitStarted(ctx, proc, 60*time.Second, port != 0, func() error {
			cctx, cancel := context.WithTimeout(ctx, e.probe.Timeout)
			defer cancel()
			_, err := e.Get(cctx, "/readyz")
			return err
		})
	})
}

// waitStarted waits until proc is ready (check). When proc exits first because a port it was
// given was taken, it returns an error that wraps ErrAddrInUse, unless the ports were fixed, and
// forgets proc, so that RetryPorts can start another.
func (e *Env) waitStarted(ctx context.Context, proc *process, timeout time.Duration, fixedPorts bool, check func() error) error {
	err := waitFor(ctx, timeout, proc, check)
	if err != nil && proc.addrInUse() {
		proc.stop(time.Second)
		e.forget(proc)
		if !fixedPorts {
			return fmt.Errorf("%s: %w", proc.name, ErrAddrInUse)
		}
	}
	return err
}

// CAFile is the path of the CA certificate that signed the apiserver's serving certificate and
// the admin client certificate.
func (e *Env) CAFile() string { return e.pki.caCert }

// ServiceAccountKeyFile is the path of the key that signs service-account tokens.
func (e *Env) ServiceAccountKeyFile() string { return e.pki.saKey }

// Get reads path (/metrics, /version, a discovery document) from the apiserver with the admin
// credentials and returns the body of a 200.
func (e *Env) Get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.APIServerURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.admin.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusNotFound:
		return nil, fmt.Errorf("GET %s: %w", path, errNotServed)
	}
	return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
}

// errNotServed is the error of Get for a path that the apiserver answers with 404.
var errNotServed = errors.New("not served")

// Dynamic returns a dynamic client with admin rights.
func (e *Env) Dynamic() dynamic.Interface { return e.dynamic }

// Stop stops the programs started against the apiserver (StartKnative's), then kube-apiserver
// and etcd, in that order, and removes a temporary state directory.
func (e *Env) Stop() error {
	var wg sync.WaitGroup
	for _, p := range e.programs {
		// Knative's webhooks keep serving for a drain period (45 s) after SIGTERM, for the
		// endpoints of a Service to move on; nothing here needs that.
		wg.Go(func() { p.stop(time.Second) })
	}
	wg.Wait()
	e.programs = nil
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].stop(10 * time.Second)
	}
	e.procs = nil
	if e.temporary {
		return os.RemoveAll(e.Dir)
	}
	return nil
}

// process is a program that the Env started.
type process struct {
	name    string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has exited and been waited for
	err     error         // what Wait returned, once exited is closed
	log     string        // the path of its log
	logFrom int64         // the size of the log when it started: earlier processes wrote the rest
}

// stop sends SIGTERM, and SIGKILL after grace, and waits for the process to exit.
func (p *process) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// addrInUse tells whether the process has said that an address it was to bind was taken. Some
// programs (Knative's webhooks) say so and run on without serving.
func (p *process) addrInUse() bool {
	b, err := os.ReadFile(p.log)
	if err != nil || int64(len(b)) < p.logFrom {
		return false
	}
	return AddrInUse(b[p.logFrom:])
}

// startProcess starts bin with the environment environ (nil: this process's), logging to
// <Dir>/<name>.log; Stop stops it after the programs.
func (e *Env) startProcess(name, bin string, environ []string, args ...string) (*process, error) {
	p, err := e.spawn(name, bin, environ, args...)
	if err == nil {
		e.procs = append(e.procs, p)
	}
	return p, err
}

// startProgram starts a program that runs against the apiserver, with the environment environ;
// Stop stops it before the apiserver.
func (e *Env) startProgram(name, bin string, environ []string, args ...string) (*process, error) {
	p, err := e.spawn(name, bin, environ, args...)
	if err == nil {
		e.programs = append(e.programs, p)
	}
	return p, err
}

// Program is a program that StartProgram started.
type Program struct{ p *process }

// Exited is closed once the program has exited.
func (p Program) Exited() <-chan struct{} { return p.p.exited }

// Log is the path of the program's log.
func (p Program) Log() string { return p.p.log }

// StartProgram starts a program that runs against the apiserver, with the environment environ
// (nil: this process's) and the command line that Options.Wrap makes, logging to
// <Dir>/<name>.log; Stop stops it before the apiserver.
func (e *Env) StartProgram(name, bin string, environ []string, args ...string) (Program, error) {
	p, err := e.startProgram(name, bin, environ, args...)
	return Program{p}, err
}

// WaitReady waits up to timeout until check succeeds, failing early when prog exits first; the
// error carries the end of its log.
func WaitReady(ctx context.Context, prog Program, timeout time.Duration, check func() error) error {
	return waitFor(ctx, timeout, prog.p, check)
}

// forget drops a process that has exited from those that Stop stops.
func (e *Env) forget(p *process) {
	e.procs = slices.DeleteFunc(e.procs, func(q *process) bool { return q == p })
	e.programs = slices.DeleteFunc(e.programs, func(q *process) bool { return q == p })
}

// spawn starts bin with the environment environ (nil: this process's), logging to
// <Dir>/<name>.log.
func (e *Env) spawn(name, bin string, environ []string, args ...string) (*process, error) {
	path := filepath.Join(e.Dir, name+".log")
	logFile, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	fi, err := logFile.Stat()
	if err != nil {
		return nil, err
	}
	argv := append([]string{bin}, args...)
	if e.wrap != nil {
		argv = e.wrap(argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The processes must not outlive a test binary that dies without calling Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{}), log: path, logFrom: fi.Size()}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
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

// probe asks whether a program is ready. It gives up, so that a port that another program holds
// without answering is asked again, and the program's exit noticed.
var probe = &http.Client{Timeout: 2 * time.Second}

// waitFor polls check until it succeeds, the timeout passes, ctx ends or proc (when not nil)
// exits or says that an address it was to bind was taken; a failure carries the end of the
// process's log.
func waitFor(ctx context.Context, timeout time.Duration, proc *process, check func() error) error {
	if proc == nil {
		return Poll(ctx, timeout, 100*time.Millisecond, check)
	}
	err := Poll(ctx, timeout, 100*time.Millisecond, func() error {
		last := check()
		if last == nil {
			return nil
		}
		select {
		case <-proc.exited:
			return Halt(fmt.Errorf("it exited (%v): %w", proc.err, last))
		default:
		}
		if proc.addrInUse() {
			return Halt(fmt.Errorf("it could not bind an address: %w", last))
		}
		return last
	})
	if err == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%s not ready: %w\n%s", proc.name, err, tail(proc.log, 20))
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

// portOr returns p, or when it is zero a port from PortForProcess.
func portOr(p int) (int, error) {
	if p != 0 {
		return p, nil
	}
	return pickPort()
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

// ClientSeeing is Client with see called with every request just before it goes out, from the
// goroutine that sends it: for tests that count or look at a component's requests, or act at
// the moment one is sent. cfg, when not nil, changes a copy of the apiserver's config first.
func (e *Env) ClientSeeing(t testing.TB, cfg func(*rest.Config), see func(*http.Request)) *kube.Client {
	t.Helper()
	c := rest.CopyConfig(e.Config)
	if cfg != nil {
		cfg(c)
	}
	c.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return seeing{next: next, see: see}
	})
	kc, err := kube.New(c)
	if err != nil {
		t.Fatalf("kubernetes client: %v", err)
	}
	return kc
}

// seeing passes each request to see before next sends it.
type seeing struct {
	next http.RoundTripper
	see  func(*http.Request)
}

func (s seeing) RoundTrip(req *http.Request) (*http.Response, error) {
	s.see(req)
	return s.next.RoundTrip(req)
}
