package function

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// listenFdsStart is the first file descriptor that socket activation passes (after stdin, stdout
// and stderr).
const listenFdsStart = 3

// inherited holds the listeners this process was handed by socket activation, by name, until
// Listen claims them.
var inherited struct {
	once sync.Once
	mu   sync.Mutex
	byFd map[string]int
	err  error
}

// Listen returns the listener that the process inherited under name by systemd's socket
// activation (LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES), or else a new one bound to addr. A
// supervisor that binds the listener itself and keeps it, as systemd does, or as reflector's
// tests do, leaves no moment in which another program could take the port; it also keeps the
// port through restarts. Each inherited listener is handed out once; the activation variables
// are removed from the environment once read, so that no child process takes them for its own.
func Listen(name, addr string) (net.Listener, error) {
	inherited.once.Do(func() {
		inherited.byFd, inherited.err = parseActivation(os.Getenv, os.Getpid())
		for _, fd := range inherited.byFd {
			syscall.CloseOnExec(fd)
		}
		for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
			_ = os.Unsetenv(v)
		}
	})
	inherited.mu.Lock()
	fd, ok := inherited.byFd[name]
	delete(inherited.byFd, name)
	err := inherited.err
	inherited.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	if !ok {
		return net.Listen("tcp", addr)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close() // FileListener holds a duplicate
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("socket activation: file descriptor %d (%s): %w", fd, name, err)
	}
	return l, nil
}

// parseActivation reads systemd's socket-activation variables through getenv and returns the
// passed file descriptors by name. They are meant for this process only when LISTEN_PID is pid;
// otherwise, as when they are unset, nothing was passed. LISTEN_FDS counts the descriptors,
// which start at 3; LISTEN_FDNAMES names them, colon-separated, in the same order. A descriptor
// without a name cannot be asked for, so names are required, and must be distinct.
func parseActivation(getenv func(string) string, pid int) (map[string]int, error) {
	if getenv("LISTEN_PID") != strconv.Itoa(pid) {
		return nil, nil
	}
	n, err := strconv.Atoi(getenv("LISTEN_FDS"))
	if err != nil || n < 0 {
		return nil, fmt.Errorf("LISTEN_FDS=%q: want the number of passed file descriptors", getenv("LISTEN_FDS"))
	}
	if n == 0 {
		return nil, nil
	}
	raw := getenv("LISTEN_FDNAMES")
	if raw == "" {
		return nil, errors.New("LISTEN_FDNAMES is required: the name of each passed file descriptor, colon-separated")
	}
	names := strings.Split(raw, ":")
	if len(names) != n {
		return nil, fmt.Errorf("LISTEN_FDNAMES names %d file descriptors, LISTEN_FDS passes %d", len(names), n)
	}
	byName := make(map[string]int, n)
	for i, name := range names {
		if name == "" {
			return nil, fmt.Errorf("LISTEN_FDNAMES=%q: file descriptor %d has no name", raw, listenFdsStart+i)
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("LISTEN_FDNAMES=%q: %q names two file descriptors", raw, name)
		}
		byName[name] = listenFdsStart + i
	}
	return byName, nil
}
