// Package stack runs the whole of reflector on one machine, on 127.0.0.1: etcd and
// kube-apiserver with the CRDs, Debian's docker-registry sending push notifications to the scan
// function, the scan and policy functions as separate processes sharing one Badger directory, and
// the cron reconciler in loop mode. Every cluster-local request proves its sender as in a
// cluster with knative/ (oidc.go): the functions accept only ServiceAccount tokens for their
// audience, checked with the apiserver's TokenReview, and the cron reconciler, the scan
// function's sink and Knative's adapters present tokens the apiserver issued. As Knative would,
// it starts a new process of a component whose process exits or is killed, with a backoff,
// unless Kill or Stop stopped it. `make run` shows it to a person; the end-to-end test drives
// it.
package stack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// Ports of the stack's processes; zero picks free ones. The stack binds the ports of the scan
// and policy functions and the cron loop itself and hands the listeners to the processes
// (function.Listen); the other programs bind theirs.
type Ports struct {
	APIServer, Etcd, Registry, Scan, Policy int
	// ScanEvents is the scan function's cluster-local CloudEvents listener; Scan is its public
	// webhook listener.
	ScanEvents int
	// Metrics are the ports of /metrics of the scan and policy functions and the cron loop.
	ScanMetrics, PolicyMetrics, CronMetrics int
	// SourceScanProfiling and SourcePolicyProfiling are the profiling ports of the two
	// ApiServerSource adapters (Knative's PROFILING_PORT, 8008 unless set).
	SourceScanProfiling, SourcePolicyProfiling int
}

// Options configure Start.
type Options struct {
	// Dir holds all state: etcd data, the registry's storage, the Badger store, logs. A
	// directory that an earlier Start used is reused, so a second run resumes.
	Dir string
	// Ports fixes the ports; zero values pick free ones.
	Ports Ports
	// CronEvery is the cron reconciler's period; zero means 10s.
	CronEvery time.Duration
	// Namespace receives the webhook Secret the registry's notifications authenticate with.
	Namespace string
	// NotifyBackoff is how long the registry waits before resending a failed notification;
	// zero means one second.
	NotifyBackoff time.Duration
	// Env adds environment variables to the processes of components, after those that Start
	// sets, so that they override them: REFLECTOR_WEBHOOK_RATE for Scan, for example.
	Env map[string][]string
}

// Stack is a running reflector.
type Stack struct {
	// Env is the apiserver and etcd.
	Env *testenv.Env
	// Kube is a client of the apiserver.
	Kube *kube.Client
	// Registry is the registry's host:port.
	Registry string
	// ScanURL is the base URL of the scan function's public surface (registry webhooks),
	// ScanEventsURL of its cluster-local CloudEvents surface, PolicyURL of the policy function.
	ScanURL, ScanEventsURL, PolicyURL string
	// Metrics maps Scan, Policy and Cron to the URL of their /metrics.
	Metrics map[string]string
	// Token is the webhook token of Options.Namespace.
	Token string

	opts     Options
	bins     string
	mu       sync.Mutex
	comps    map[string]*component
	stopping bool
	done     chan struct{} // closed by Stop: pending restarts give up
	// listeners are those of reflector's programs, by component, while bound (bind).
	listeners map[string][]testenv.Socket
	// picked are the ports of Options.Ports that Start picked for programs that bind their own.
	picked []*int
}

// Components that Stop and Restart name.
const (
	Registry = "docker-registry"
	Scan     = "scan"
	Policy   = "policy"
	Cron     = "cron"
	// SourceScan and SourcePolicy are Knative's ApiServerSource receive adapter, one per
	// function: where knative/ has one ApiServerSource and a Broker whose Triggers route
	// ImageRepository events to the public surface's /broker and ImagePolicy events to the
	// policy function, the stack has no Broker, so each adapter watches one kind and sends to
	// where that kind's Triggers deliver.
	SourceScan   = "source-scan"
	SourcePolicy = "source-policy"
)

// adapterReady is the line client-go's reflector logs at verbosity 2 once its first list is done
// and it watches.
const adapterReady = "Caches populated"

// AdapterBinary is where `make knative-env` puts Knative's ApiServerSource receive adapter.
func AdapterBinary() string {
	return filepath.Join(testenv.BinDir(), "knative-eventing", "apiserver_receive_adapter")
}

// Start builds reflector's binaries, starts every process and waits until each answers.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.CronEvery == 0 {
		opts.CronEvery = 10 * time.Second
	}
	if opts.NotifyBackoff == 0 {
		opts.NotifyBackoff = time.Second
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	for _, sub := range []string{"kube", "registry", "store", "bin", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	s := &Stack{opts: opts, bins: filepath.Join(dir, "bin"), comps: map[string]*component{}, done: make(chan struct{}),
		listeners: map[string][]testenv.Socket{}}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if _, err := os.Stat(AdapterBinary()); err != nil {
		return nil, fmt.Errorf("Knative's ApiServerSource receive adapter is not built (run make knative-env): %w", err)
	}
	if err := build(ctx, s.bins); err != nil {
		return nil, err
	}
	p := &s.opts.Ports
	// Reflector's programs are handed listeners that the stack binds and keeps (socket
	// activation), so that no other program can take their ports; the other programs bind
	// their own from a port number, picked here and again when another program took it first.
	for _, c := range []string{Scan, Policy, Cron} {
		if err := s.bind(c); err != nil {
			return nil, err
		}
	}
	for _, port := range []*int{&p.Registry, &p.SourceScanProfiling, &p.SourcePolicyProfiling} {
		if *port == 0 {
			if *port, err = testenv.PortForProcess(); err != nil {
				return nil, err
			}
			s.picked = append(s.picked, port)
		}
	}
	s.Registry = "127.0.0.1:" + strconv.Itoa(p.Registry)
	s.ScanURL = "http://127.0.0.1:" + strconv.Itoa(p.Scan)
	s.ScanEventsURL = "http://127.0.0.1:" + strconv.Itoa(p.ScanEvents)
	s.PolicyURL = "http://127.0.0.1:" + strconv.Itoa(p.Policy)
	s.Metrics = map[string]string{
		Scan:   "http://127.0.0.1:" + strconv.Itoa(p.ScanMetrics) + "/metrics",
		Policy: "http://127.0.0.1:" + strconv.Itoa(p.PolicyMetrics) + "/metrics",
		Cron:   "http://127.0.0.1:" + strconv.Itoa(p.CronMetrics) + "/metrics",
	}

	if s.Env, err = testenv.Start(ctx, testenv.Options{Dir: filepath.Join(dir, "kube"), APIServerPort: p.APIServer, EtcdPort: p.Etcd}); err != nil {
		return nil, err
	}
	if s.Kube, err = kube.New(s.Env.Config); err != nil {
		return nil, err
	}
	if s.Token, err = s.webhookSecret(ctx); err != nil {
		return nil, err
	}
	if err := s.senderIdentities(ctx); err != nil {
		return nil, err
	}
	for _, c := range Components() {
		if err := testenv.RetryPorts(func() error { return s.startOnPicked(ctx, c) }); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// startOnPicked starts component c. When the process exits because its port was taken, which
// only a port that PortForProcess picked can be here, it cancels the restart, picks another port
// and returns an error that wraps testenv.ErrAddrInUse, so that RetryPorts starts it again.
func (s *Stack) startOnPicked(ctx context.Context, c string) error {
	err := s.start(ctx, c)
	if !errors.Is(err, testenv.ErrAddrInUse) {
		return err
	}
	_ = s.Kill(c, syscall.SIGKILL)
	port := map[string]*int{Registry: &s.opts.Ports.Registry,
		SourceScan: &s.opts.Ports.SourceScanProfiling, SourcePolicy: &s.opts.Ports.SourcePolicyProfiling}[c]
	if port == nil || !slices.Contains(s.picked, port) {
		return fmt.Errorf("%s: the port it was given is taken: %v", c, err)
	}
	if *port, err = testenv.PortForProcess(); err != nil {
		return err
	}
	s.Registry = "127.0.0.1:" + strconv.Itoa(s.opts.Ports.Registry)
	return fmt.Errorf("starting %s: %w", c, testenv.ErrAddrInUse)
}

// socket is a listener of one of reflector's programs: the name the program asks for it by
// (cmd/scan's and cmd/policy's listener names, function.MetricsListener) and its port.
type socket struct {
	name string
	port *int
}

// sockets returns the listeners that component c is handed; none for programs other than
// reflector's.
func (s *Stack) sockets(c string) []socket {
	p := &s.opts.Ports
	switch c {
	case Scan:
		return []socket{{"webhooks", &p.Scan}, {"cloudevents", &p.ScanEvents}, {function.MetricsListener, &p.ScanMetrics}}
	case Policy:
		return []socket{{"policy", &p.Policy}, {function.MetricsListener, &p.PolicyMetrics}}
	case Cron:
		return []socket{{function.MetricsListener, &p.CronMetrics}}
	}
	return nil
}

// bind binds the listeners of component c, unless they are bound: on the ports that Options
// fix, else on ports that testenv.ListenLow picks, which the ports record. The stack keeps them
// while the component runs and while it restarts after an exit, so that connections wait for the
// new process; Kill closes them, so that a component that is down refuses connections, and
// bind binds the same ports again, which below the ephemeral range no client connection takes
// meanwhile. The caller holds s.mu, or is Start.
func (s *Stack) bind(c string) error {
	if s.listeners[c] != nil {
		return nil
	}
	var socks []testenv.Socket
	for _, sk := range s.sockets(c) {
		var (
			l   net.Listener
			err error
		)
		if *sk.port == 0 {
			l, err = testenv.ListenLow()
		} else {
			l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*sk.port))
		}
		if err != nil {
			for _, bound := range socks {
				bound.Listener.Close()
			}
			return fmt.Errorf("%s: %s listener: %w", c, sk.name, err)
		}
		*sk.port = l.Addr().(*net.TCPAddr).Port
		socks = append(socks, testenv.Socket{Name: sk.name, Listener: l})
	}
	if socks != nil {
		s.listeners[c] = socks
	}
	return nil
}

// unbind closes the listeners of component c. The caller holds s.mu.
func (s *Stack) unbind(c string) {
	for _, sk := range s.listeners[c] {
		sk.Listener.Close()
	}
	delete(s.listeners, c)
}

// build compiles the three binaries of reflector into dir as ko builds the images' (.ko.yaml,
// make images): static, without cgo, and with -trimpath. A binary that cgo links to the C
// library maps libc and the dynamic loader too (about 1.3 MiB resident per process) and resolves
// names through the C library, neither of which a deployed function does.
func build(ctx context.Context, dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", dir+"/", "./cmd/scan", "./cmd/policy", "./cmd/cron")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building reflector: %v\n%s", err, out)
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside reflector's module")
	}
	return filepath.Dir(mod), nil
}

// webhookSecret creates the namespace's webhook Secret, or reads the one an earlier run made.
func (s *Stack) webhookSecret(ctx context.Context) (string, error) {
	ns := s.opts.Namespace
	if _, err := s.Kube.Namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	sec, err := s.Kube.Secrets.Get(ctx, ns, "reflector-webhook")
	if err == nil {
		return string(sec.Data["token"]), nil
	}
	if !apierrors.IsNotFound(err) {
		return "", err
	}
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	_, err = s.Kube.Secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "reflector-webhook", Namespace: ns},
		Data:       map[string][]byte{"token": []byte(token)},
	})
	return token, err
}

// ready tells whether a component's new process is ready (nil when it is), and what it waits
// for when it is not.
type ready func() error

// probe asks whether a process answers. A connection to a listener that the stack keeps is
// taken while no process serves it, so a request must give up to be asked again.
var probe = &http.Client{Timeout: 2 * time.Second}

// answers is the readiness of a process that serves url: any answer below 500.
func answers(url string) ready {
	return func() error {
		resp, err := probe.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("%s answered %d", url, resp.StatusCode)
		}
		return nil
	}
}

// RegistryHeader is the header by which a docker-registry that RegistryConfig configures names
// its data directory.
const RegistryHeader = "Reflector-Registry-Data"

// RegistryAnswers tells whether the docker-registry whose data directory is dataDir answers
// url (its /v2/) with 200. A port that a test picked may have been taken by another program
// before the registry bound it, and that program's answer is not the registry's.
func RegistryAnswers(url, dataDir string) error {
	resp, err := probe.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if got := resp.Header.Get(RegistryHeader); resp.StatusCode != http.StatusOK || got != dataDir {
		return fmt.Errorf("%s answered %d with %s %q: not the registry of %s", url, resp.StatusCode, RegistryHeader, got, dataDir)
	}
	return nil
}

// logs is the readiness of a process that writes line to its log beyond what the log held
// when the process started.
func logs(path, line string) ready {
	var from int64
	if fi, err := os.Stat(path); err == nil {
		from = fi.Size()
	}
	return func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if int64(len(b)) < from || !bytes.Contains(b[from:], []byte(line)) {
			return fmt.Errorf("no %q in %s yet", line, path)
		}
		return nil
	}
}

// command returns the command line and environment of a component, and how to tell that its
// process is ready (nil for none).
func (s *Stack) command(c string) (*exec.Cmd, ready, error) {
	d := s.opts.Dir
	// The registries of a stack live on 127.0.0.1, and that is all it allows them to reach:
	// every other loopback address stands for a cluster's private network.
	env := append(os.Environ(), "KUBECONFIG="+s.Env.Kubeconfig, "REFLECTOR_LISTEN_HOST=127.0.0.1",
		egress.EnvAllow+"="+testenv.LoopbackAllowed)
	switch c {
	case Registry:
		cfg := filepath.Join(d, "registry", "config.yml")
		if err := os.WriteFile(cfg, []byte(s.registryConfig()), 0o600); err != nil {
			return nil, nil, err
		}
		url, data := "http://"+s.Registry+"/v2/", s.registryData()
		return exec.Command("docker-registry", "serve", cfg), func() error { return RegistryAnswers(url, data) }, nil
	case Scan:
		cmd := exec.Command(filepath.Join(s.bins, "scan"))
		cmd.Env = append(env, "PORT="+strconv.Itoa(s.opts.Ports.Scan),
			"REFLECTOR_CLOUDEVENTS_PORT="+strconv.Itoa(s.opts.Ports.ScanEvents),
			"REFLECTOR_METRICS_ADDR=127.0.0.1:"+strconv.Itoa(s.opts.Ports.ScanMetrics),
			"REFLECTOR_STORE_DIR="+filepath.Join(d, "store"), "K_SINK="+s.PolicyURL, "GOMEMLIMIT="+FunctionMemoryLimit, "GOGC="+FunctionGCPercent)
		return cmd, answers(s.ScanURL + "/healthz"), nil
	case Policy:
		cmd := exec.Command(filepath.Join(s.bins, "policy"))
		cmd.Env = append(env, "PORT="+strconv.Itoa(s.opts.Ports.Policy),
			"REFLECTOR_METRICS_ADDR=127.0.0.1:"+strconv.Itoa(s.opts.Ports.PolicyMetrics),
			"REFLECTOR_STORE_DIR="+filepath.Join(d, "store"), "GOMEMLIMIT="+FunctionMemoryLimit, "GOGC="+FunctionGCPercent,
			"REFLECTOR_STEADY_GOGC="+PolicySteadyGCPercent)
		return cmd, answers(s.PolicyURL + "/healthz"), nil
	case Cron:
		cmd := exec.Command(filepath.Join(s.bins, "cron"), "--every="+s.opts.CronEvery.String(),
			"--spread="+(s.opts.CronEvery/4).String(), "--scan-url="+s.ScanEventsURL, "--policy-url="+s.PolicyURL,
			"--store-dir="+filepath.Join(d, "store"),
			"--scan-token-file="+s.tokenPath("cron-scan"), "--policy-token-file="+s.tokenPath("cron-policy"),
			"--metrics-addr=127.0.0.1:"+strconv.Itoa(s.opts.Ports.CronMetrics))
		cmd.Env = env
		return cmd, nil, nil
	case SourceScan:
		return s.adapter(env, c, s.ScanURL+BrokerPath, "imagerepositories", s.opts.Ports.SourceScanProfiling), logs(s.Log(c), adapterReady), nil
	case SourcePolicy:
		return s.adapter(env, c, s.PolicyURL, "imagepolicies", s.opts.Ports.SourcePolicyProfiling), logs(s.Log(c), adapterReady), nil
	}
	return nil, nil, fmt.Errorf("unknown component %q", c)
}

// BrokerPath is the path of the scan function's public surface where knative/'s Triggers deliver
// the ApiServerSource's ImageRepository events (functions/scan.BrokerPath).
const BrokerPath = "/broker"

// FunctionMemoryLimit is the functions' soft memory limit (GOMEMLIMIT), as knative/ sets it.
const FunctionMemoryLimit = "32MiB"

// FunctionGCPercent is the functions' garbage-collector target (GOGC), as knative/ sets it.
const FunctionGCPercent = "400"

// PolicySteadyGCPercent is the policy function's collector target once started
// (REFLECTOR_STEADY_GOGC), as knative/policy.yaml sets it.
const PolicySteadyGCPercent = "50"

// adapter returns the command of an ApiServerSource receive adapter that sends the add, update
// and delete events of one resource of image.toolkit.fluxcd.io/v1 in every namespace to sink,
// configured as Knative's ApiServerSource controller configures the adapter's Deployment for the
// ApiServerSource in knative/eventing.yaml (Resource mode, all namespaces). The adapter sends
// nothing for the objects its first list finds, only for changes it watches after that, and it
// has no readiness endpoint: client-go's log line that the list is done (klog verbosity 2) is
// its readiness, so that Start returns only once a change cannot be missed.
func (s *Stack) adapter(env []string, name, sink, resource string, profilingPort int) *exec.Cmd {
	cfg := fmt.Sprintf(`{"allNamespaces":true,"mode":"Resource","resources":[{"gvr":{"Group":"image.toolkit.fluxcd.io","Version":"v1","Resource":%q}}]}`, resource)
	cmd := exec.Command(AdapterBinary(), "--kubeconfig="+s.Env.Kubeconfig)
	cmd.Env = append(env, "K_SINK="+sink, "K_SOURCE_CONFIG="+cfg,
		"NAME=reflector-objects", "NAMESPACE=reflector-system", "SYSTEM_NAMESPACE=knative-eventing",
		"POD_NAME="+name, "K_COMPONENT=apiserversource", "K_KLOG_VERBOSITY=2",
		"PROFILING_PORT="+strconv.Itoa(profilingPort),
		// Its servers on 127.0.0.1 only (hack/knative.sh), not on every interface.
		"KNATIVE_LISTEN_HOST=127.0.0.1", "METRICS_PROMETHEUS_HOST=127.0.0.1")
	return cmd
}

// registryConfig is docker-registry's configuration for this stack.
func (s *Stack) registryConfig() string {
	return RegistryConfig(s.registryData(), s.Registry,
		fmt.Sprintf("%s/hook/distribution/%s", s.ScanURL, s.opts.Namespace), s.Token, s.opts.NotifyBackoff)
}

// registryData is the directory of the registry's images.
func (s *Stack) registryData() string { return filepath.Join(s.opts.Dir, "registry", "data") }

// RegistryConfig returns a configuration of Debian's docker-registry (CNCF distribution 2.8)
// that stores images under dataDir, serves plain HTTP on addr, and sends a notification of every
// push to hookURL with the webhook token as a Bearer credential, retrying after backoff. Each
// answer carries RegistryHeader set to dataDir, by which a readiness probe tells this registry
// from another program that took its port first (RegistryAnswers).
func RegistryConfig(dataDir, addr, hookURL, token string, backoff time.Duration) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  headers:
    %s: [%q]
notifications:
  endpoints:
    - name: reflector
      url: %s
      headers:
        Authorization: [Bearer %s]
      timeout: 2s
      threshold: 3
      backoff: %s
`, dataDir, addr, RegistryHeader, dataDir, hookURL, token, backoff)
}

// withEnv returns command's result with the environment of sender proof (senderProof) and
// Options.Env of c added.
func (s *Stack) withEnv(c string) (*exec.Cmd, ready, error) {
	cmd, ready, err := s.command(c)
	if err != nil {
		return nil, nil, err
	}
	if extra := append(s.senderProof(c), s.opts.Env[c]...); len(extra) > 0 {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, extra...)
	}
	return cmd, ready, nil
}

// Command returns a command that runs component c with the binary, arguments and environment
// that Start gives it, not started and not tracked by the Stack: a caller can run it in place of
// the Stack's own process after stopping that with Kill.
func (s *Stack) Command(c string) (*exec.Cmd, error) {
	cmd, _, err := s.withEnv(c)
	return cmd, err
}

// PID returns the process id of a running component, or 0 when it is not running.
func (s *Stack) PID(c string) int {
	return s.Status(c).PID
}

// start starts component c, which must not be running, and waits until it answers.
func (s *Stack) start(ctx context.Context, c string) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return errors.New("the stack is stopping")
	}
	if comp := s.comps[c]; comp != nil {
		if comp.proc != nil {
			s.mu.Unlock()
			return fmt.Errorf("%s is running", c)
		}
		// A deliberate start replaces a pending restart and forgets earlier exits.
		comp.gen++
		comp.delay = 0
	}
	var logFrom int64
	if fi, err := os.Stat(s.Log(c)); err == nil {
		logFrom = fi.Size()
	}
	p, ready, err := s.spawn(c)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("starting %s: %w", c, err)
	}
	if ready == nil {
		return nil
	}
	exited := p.exited
	err = testenv.Poll(ctx, 30*time.Second, 20*time.Millisecond, func() error {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			if b, rerr := os.ReadFile(s.Log(c)); rerr == nil && int64(len(b)) >= logFrom && testenv.AddrInUse(b[logFrom:]) {
				return testenv.Halt(testenv.ErrAddrInUse)
			}
			// Otherwise the stack starts another process after the backoff: wait for that one.
			exited = nil
		default:
		}
		return err
	})
	if err == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%s not ready: %w; its log is %s", c, err, s.Log(c))
}

// Kill stops a component with sig (SIGTERM for a clean stop, SIGKILL for a crash) and waits
// until it has exited. The Stack leaves a component that Kill stopped down until Restart; Kill
// also cancels a restart the Stack had pending.
func (s *Stack) Kill(c string, sig syscall.Signal) error {
	s.mu.Lock()
	comp := s.comps[c]
	if comp == nil || (comp.proc == nil && comp.restartAt.IsZero()) {
		s.mu.Unlock()
		return fmt.Errorf("%s is not running", c)
	}
	p := comp.proc
	comp.proc, comp.restartAt = nil, time.Time{}
	comp.gen++
	s.mu.Unlock()
	if p != nil {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	s.mu.Lock()
	if comp.proc == nil {
		s.unbind(c)
	}
	s.mu.Unlock()
	return nil
}

// Restart starts a component that Kill stopped, or at once one that the Stack is about to
// restart, and waits until it answers.
func (s *Stack) Restart(ctx context.Context, c string) error {
	return s.start(ctx, c)
}

// StoreDir returns the directory of the Badger tag store that the processes share.
func (s *Stack) StoreDir() string {
	return filepath.Join(s.opts.Dir, "store")
}

// Log returns the path of a component's log.
func (s *Stack) Log(c string) string {
	return filepath.Join(s.opts.Dir, "logs", c+".log")
}

// Stop stops every process, the functions first so that they close the store cleanly.
// Nothing is restarted after Stop.
func (s *Stack) Stop() error {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.done)
	}
	s.mu.Unlock()
	for _, c := range []string{SourceScan, SourcePolicy, Cron, Scan, Policy, Registry} {
		_ = s.Kill(c, syscall.SIGTERM)
	}
	s.mu.Lock()
	for c := range s.listeners {
		s.unbind(c)
	}
	s.mu.Unlock()
	if s.Env != nil {
		return s.Env.Stop()
	}
	return nil
}
