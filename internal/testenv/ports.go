package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Listener binds a port of 127.0.0.1 that the system picks and closes it when tb ends: the
// listener of a server that a test runs in-process, which serves on it and has its address
// (Addr) from it, so that no other program can take the port in between.
func Listener(tb testing.TB) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listening on 127.0.0.1: %v", err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// Ports below the ephemeral range (32768 on Linux) are never the local port of a client
// connection, so one that a program released is free to bind again.
const lowPortMin, lowPortMax = 20000, 32000

// ListenLow binds a port of 127.0.0.1 below the ephemeral range, picked at random, and keeps
// it: the listener of a program that a supervisor hands on (StartWithListeners) and binds
// again on the same port after stopping the program, which a port of the ephemeral range
// cannot promise, since any client connection may take it as its local port meanwhile.
func ListenLow() (net.Listener, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(lowPortMin+rand.IntN(lowPortMax-lowPortMin)))
		if err == nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no free port of 127.0.0.1 between %d and %d", lowPortMin, lowPortMax)
}

// PortForProcess returns a port of 127.0.0.1 below the ephemeral range that was free when it
// looked, for a program that binds its listener itself from a port number and cannot be handed
// one: etcd, kube-apiserver, docker-registry, Knative's programs, a functions-framework host.
// It closes the port before returning, so another program may take it before that program
// binds it; start such programs through RetryPorts, which picks another port when that
// happens. Reflector's own programs take a listener instead (StartWithListeners).
func PortForProcess() (int, error) {
	l, err := ListenLow()
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// pickPort is PortForProcess, which testenv's own tests replace to hand out a taken port.
var pickPort = PortForProcess

// ErrAddrInUse is what a start that RetryPorts retries wraps when its program could not bind a
// port because another program had taken it.
var ErrAddrInUse = errors.New("address already in use")

// portAttempts bounds how many ports RetryPorts tries.
const portAttempts = 5

// AddrInUse tells whether a program's output says that it could not bind an address because
// it was taken, in the words of Go's net package and of the C library.
func AddrInUse(output []byte) bool {
	return bytes.Contains(bytes.ToLower(output), []byte("address already in use"))
}

// RetryPorts calls start, which picks its ports with PortForProcess and starts a program on
// them, again as long as it fails with an error that wraps ErrAddrInUse, up to a bound.
func RetryPorts(start func() error) error {
	var err error
	for range portAttempts {
		if err = start(); !errors.Is(err, ErrAddrInUse) {
			return err
		}
	}
	return fmt.Errorf("%d ports were taken before the program bound them: %w", portAttempts, err)
}

// Socket is a listener that a program inherits, and the name it asks for it by
// (function.Listen).
type Socket struct {
	Name     string
	Listener net.Listener
}

// activate runs the program with LISTEN_PID set to its own process id, which only the process
// itself can know: sh's $$ before exec replaces the shell with the program.
const activate = `LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"`

// StartWithListeners starts cmd with the sockets passed the way systemd's socket activation
// passes them: as file descriptors 3 onwards, counted by LISTEN_FDS and named by
// LISTEN_FDNAMES, for the process whose id is LISTEN_PID; with no sockets, it just starts cmd.
// The caller keeps its listeners, and may pass them again to a later process. cmd must have no
// ExtraFiles of its own.
func StartWithListeners(cmd *exec.Cmd, socks ...Socket) error {
	if cmd.Err != nil {
		return cmd.Err
	}
	if len(socks) == 0 {
		return cmd.Start()
	}
	if len(cmd.ExtraFiles) > 0 {
		return errors.New("StartWithListeners: the command already passes files")
	}
	names := make([]string, len(socks))
	for i, s := range socks {
		if s.Name == "" || strings.Contains(s.Name, ":") {
			return fmt.Errorf("StartWithListeners: socket name %q: want a name without colons", s.Name)
		}
		sl, ok := s.Listener.(interface{ File() (*os.File, error) })
		if !ok {
			return fmt.Errorf("StartWithListeners: %s: a %T has no file descriptor", s.Name, s.Listener)
		}
		f, err := sl.File()
		if err != nil {
			return fmt.Errorf("StartWithListeners: %s: %w", s.Name, err)
		}
		defer f.Close() // the child has its own copy once started
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		names[i] = s.Name
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "LISTEN_FDS="+strconv.Itoa(len(socks)), "LISTEN_FDNAMES="+strings.Join(names, ":"))
	cmd.Args = append([]string{"sh", "-c", activate, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	cmd.Err = nil
	err := cmd.Start()
	cmd.ExtraFiles = nil
	return err
}

// Refusing returns an address of 127.0.0.1 that refuses connections until tb ends: its port is
// bound, so no other program can take it, but nothing listens on it.
func Refusing(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socket: %v", err)
	}
	tb.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("binding 127.0.0.1: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("getsockname: %v", err)
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

// Process is a program that a test started with StartOnPort.
type Process struct {
	// Cmd is the started command; wait for it with Wait, not Cmd.Wait.
	Cmd *exec.Cmd
	// Port is the port it was given.
	Port int
	// Output is what it wrote to stdout and stderr.
	Output *LogBuffer

	exited chan struct{}
	err    error
}

// Wait waits for the process to exit and returns what exec.Cmd.Wait returned.
func (p *Process) Wait() error {
	<-p.exited
	return p.err
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// StartOnPort starts the program that command returns for a port from PortForProcess, for a
// program that binds its listener itself from a port number, and waits up to within until
// ready(port) succeeds; ready must give up within seconds (ProbeClient), since another program
// that holds the port may take a connection and never answer. When the program exits first saying that its address was taken, it
// starts it again on another port, a bounded number of times. The process is killed when tb
// ends, unless it has exited.
func StartOnPort(tb testing.TB, within time.Duration, command func(port int) *exec.Cmd, ready func(port int) error) *Process {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		port, err := pickPort()
		if err != nil {
			tb.Fatal(err)
		}
		p := &Process{Cmd: command(port), Port: port, Output: &LogBuffer{}, exited: make(chan struct{})}
		p.Cmd.Stdout, p.Cmd.Stderr = p.Output, p.Output
		if err := p.Cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		go func() {
			p.err = p.Cmd.Wait()
			close(p.exited)
		}()
		tb.Cleanup(func() {
			select {
			case <-p.exited:
			default:
				_ = p.Cmd.Process.Kill()
				<-p.exited
			}
		})
		gone := false
		Eventually(tb, within, func() error {
			select {
			case <-p.exited:
				gone = true
				return nil
			default:
			}
			return ready(port)
		})
		if !gone {
			return p
		}
		if !AddrInUse([]byte(p.Output.String())) || attempt == portAttempts {
			tb.Fatalf("%s exited before it was ready (%v):\n%s", p.Cmd.Path, p.err, p.Output)
		}
	}
}

// ProbeClient returns an HTTP client for readiness checks, which gives up after 2 seconds.
func ProbeClient() *http.Client { return probe }
