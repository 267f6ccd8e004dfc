package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// processEnv tells the test binary to be the policy function's process
// (TestPolicyCommandProcess).
const processEnv = "REFLECTOR_TEST_POLICY_PROCESS"

// TestPolicyCommandProcess is the process that TestPolicyCommandIntegrationGracefulShutdown
// starts: the command's run, configured from the environment.
func TestPolicyCommandProcess(t *testing.T) {
	if os.Getenv(processEnv) == "" {
		t.Skip("the function process of TestPolicyCommandIntegrationGracefulShutdown")
	}
	if err := run(function.Timeouts{Drain: 20 * time.Second}, slog.New(slog.NewJSONHandler(os.Stderr, nil))); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyCommandIntegrationGracefulShutdown: SIGTERM during an evaluation that waits for the
// tag store lets it finish and answer, then the process ends cleanly.
func TestPolicyCommandIntegrationGracefulShutdown(t *testing.T) {
	env := testenv.Kube(t)
	ctx := context.Background()
	c := env.Client(t)
	ns := env.Namespace(t)
	dir := t.TempDir()
	repo, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec:       v1.ImageRepositorySpec{Image: "ghcr.io/org/app", Interval: metav1.Duration{Duration: time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := reconcile.RepositoryIdentity(repo)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Name: "app"},
			Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: "*"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	writer := store.New(dir, store.WithLinger(0))
	if _, _, err := writer.Put(ctx, reconcile.StoreKey(ns, "app"), id, []string{"1.0.0", "1.1.0"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := writer.Close(); err != nil {
		t.Fatal(err)
	}
	// A writer holds the store, so that every evaluation waits until it lets go.
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}

	// The function runs as its own process, on a listener bound here and handed over as
	// socket activation hands it, so that no other program can take the port first.
	l := testenv.Listener(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPolicyCommandProcess$")
	cmd.Env = append(os.Environ(), processEnv+"=1", "REFLECTOR_LISTEN_HOST=127.0.0.1",
		"REFLECTOR_METRICS_ADDR=127.0.0.1:0", "KUBECONFIG="+env.Kubeconfig, "REFLECTOR_STORE_DIR="+dir, "K_SINK=")
	logs := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testenv.StartWithListeners(cmd, testenv.Socket{Name: "policy", Listener: l}); err != nil {
		t.Fatal(err)
	}
	// Only the process holds the port now: once it exits, the port refuses connections.
	l.Close()
	ran := make(chan error, 1)
	go func() { ran <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-ran
	})
	url := "http://" + l.Addr().String()
	testenv.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return fmt.Errorf("the function did not start: %w", err)
		}
		resp.Body.Close()
		return nil
	})

	type answer struct {
		code int
		body []byte
		err  error
	}
	answered := make(chan answer, 1)
	sent := make(chan struct{})
	go func() {
		// The cron reconciler's request: evaluated before the answer. (/evaluate is off by
		// default.)
		req, _ := http.NewRequest(http.MethodPost, url+"/", strings.NewReader(`{"namespace":"`+ns+`","name":"app"}`))
		for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Type": events.TypePolicyRequested,
			"Ce-Source": events.SourceCron, "Ce-Id": "in-flight", "Content-Type": "application/json"} {
			req.Header.Set(k, v)
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) },
		}))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- answer{code: resp.StatusCode, body: b, err: err}
	}()
	// The evaluation waits for the store that db holds; SIGTERM arrives meanwhile. A request
	// written is not yet a request in flight: until the server accepts the connection it sits
	// in the listener's backlog, which shutting down drops. The evaluation is in flight once
	// it waits at the store's gate, where a waiting reader holds a shared lock.
	<-sent
	gate, err := os.Open(filepath.Join(dir, "reflector.gate"))
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := syscall.Flock(int(gate.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return nil // a waiter holds the gate
		}
		_ = syscall.Flock(int(gate.Fd()), syscall.LOCK_UN)
		return errors.New("the evaluation does not wait for the store yet")
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), `"msg":"shutting down"`) {
			return errors.New("the function has not begun shutting down")
		}
		return nil
	})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	a := <-answered
	if a.err != nil || a.code != http.StatusAccepted {
		t.Errorf("in-flight evaluation: %d %s %v; the function's log:\n%s", a.code, a.body, a.err, logs)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("the function: %v, want exit status 0; its log:\n%s", err, logs)
		}
		ran <- err
	case <-time.After(20 * time.Second):
		t.Fatal("the function did not stop")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}
	p, err := c.Policies.Get(ctx, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "1.1.0" {
		t.Errorf("latestRef %+v", p.Status.LatestRef)
	}
}
