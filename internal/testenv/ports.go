package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
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
// LISTEN_FDNAMES, for the process whose id is LISTEN_PID. The caller keeps its listeners, and
// may pass them again to a later process. cmd must have no ExtraFiles of its own.
func StartWithListeners(cmd *exec.Cmd, socks ...Socket) error {
	if cmd.Err != nil {
		return cmd.Err
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
