package testenv

import (
	"errors"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestRefusingRefuses(t *testing.T) {
	addr := Refusing(t)
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
		t.Fatalf("%s took a connection", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Errorf("%s could be bound by another listener", addr)
	}
}

// TestStartOnPortRetriesATakenPort starts a program that says its address was taken and exits,
// then one that stays up, and checks that the second is the one returned, on another port.
func TestStartOnPortRetriesATakenPort(t *testing.T) {
	var ports []int
	p := StartOnPort(t, 10*time.Second, func(port int) *exec.Cmd {
		ports = append(ports, port)
		if len(ports) == 1 {
			return exec.Command("sh", "-c", "echo 'listen tcp: bind: address already in use' >&2; exit 1")
		}
		return exec.Command("sleep", "60")
	}, func(int) error {
		if len(ports) < 2 {
			return errors.New("not the second program yet")
		}
		return nil
	})
	if len(ports) != 2 || p.Port != ports[1] {
		t.Fatalf("started on ports %v, returned the one on %d", ports, p.Port)
	}
	select {
	case <-p.Exited():
		t.Fatalf("the second program exited: %v", p.Wait())
	default:
	}
}

func TestRetryPortsStopsAtOtherErrors(t *testing.T) {
	calls := 0
	other := errors.New("not a port")
	if err := RetryPorts(func() error { calls++; return other }); err != other || calls != 1 {
		t.Errorf("RetryPorts: %v after %d calls, want the error after one", err, calls)
	}
	calls = 0
	if err := RetryPorts(func() error { calls++; return ErrAddrInUse }); !errors.Is(err, ErrAddrInUse) || calls != portAttempts {
		t.Errorf("RetryPorts: %v after %d calls, want ErrAddrInUse after %d", err, calls, portAttempts)
	}
}
