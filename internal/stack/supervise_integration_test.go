package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestKilledFunctionRestartsIntegration kills the policy function from outside, as the kernel's
// OOM killer or a crash would, and checks that the stack starts it again with a growing backoff,
// that pushes reach the ImagePolicy afterwards, and that a deliberate Kill stays down.
func TestKilledFunctionRestartsIntegration(t *testing.T) {
	ctx := context.Background()
	// No cron pass during the test: what reaches the policy arrives through the restarted
	// function.
	s := start(t, stack.Options{CronEvery: time.Hour})
	image := s.Registry + "/restart/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(observedManifests, image))); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "stable", "1.0.0")

	for i := 1; i <= 2; i++ {
		killed := s.PID(stack.Policy)
		if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitRestarted(t, s, stack.Policy, killed)
		st := s.Status(stack.Policy)
		if st.Restarts != i || !strings.Contains(st.LastExit, "killed") {
			t.Errorf("after kill %d: status %+v, want %d restarts after a kill", i, st, i)
		}
	}
	// The second process died at once, so the stack waited twice as long before the third.
	if got, want := restartWaits(t, s.Log(stack.Policy)), []string{"500ms", "1s"}; !slices.Equal(got, want) {
		t.Errorf("restart waits in the policy log: %v, want %v", got, want)
	}

	if _, err := stack.Push(image + ":1.1.0"); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "stable", "1.1.0")

	// Kill returns once the process has exited, and takes the component over: no restart is
	// pending, and none is announced in the log.
	if err := s.Kill(stack.Policy, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(stack.Policy); st.State != stack.Down || st.PID != 0 {
		t.Errorf("after Kill: status %+v, want down with no restart pending", st)
	}
	if err := s.Restart(ctx, stack.Policy); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(stack.Policy); st.State != stack.Up || st.PID == 0 || st.Restarts != 2 {
		t.Errorf("after Restart: status %+v, want up, still 2 restarts", st)
	}
	if got, want := restartWaits(t, s.Log(stack.Policy)), []string{"500ms", "1s"}; !slices.Equal(got, want) {
		t.Errorf("restart waits in the policy log after Kill and Restart: %v, want still %v", got, want)
	}
}

// waitRestarted waits until the stack has replaced process killed of component c with a new one
// that answers /healthz, and checks that it said it was restarting in between.
func waitRestarted(t *testing.T, s *stack.Stack, c string, killed int) {
	t.Helper()
	restarting := false
	testenv.Eventually(t, 30*time.Second, func() error {
		st := s.Status(c)
		restarting = restarting || st.State == stack.Restarting
		if st.State != stack.Up || st.PID == killed {
			return fmt.Errorf("%s not back after its process %d was killed: %+v; log %s", c, killed, st, s.Log(c))
		}
		resp, err := http.Get(s.PolicyURL + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: /healthz answered %s", c, resp.Status)
		}
		return nil
	})
	if !restarting {
		t.Errorf("%s came back without being seen restarting", c)
	}
}

// restartWaits returns the waits the stack announced in a component's log before each restart.
func restartWaits(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var waits []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Source    string `json:"source"`
			RestartIn string `json:"restart_in"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Source == "stack" && line.RestartIn != "" {
			waits = append(waits, line.RestartIn)
		}
	}
	return waits
}
