package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/imagereflector/reflector/internal/testenv"
)

// Namespaces are a network namespace and a mount namespace made for a node and held by a
// process of their own (unshare(1) running sleep). Every program of the node runs in both
// through nsenter(1): in the network namespace, whatever a program binds is reachable from
// inside it only; in the mount namespace (a slave of the host's, so that the host's mounts are
// seen), the mounts that the node makes (containers' root file systems, pod network namespaces'
// files, volumes, the tmpfs file systems that Start puts over the paths that containerd and the
// CNI plugins fix) stay there and go away with it. nsenter, not `ip netns exec`: the latter
// mounts a new /sys, which hides the cgroup file systems that the kubelet and runc need.
type Namespaces struct {
	holder *exec.Cmd
	exited chan struct{}
	// net and mnt are the holder's namespace files; netFile is net, open for setns(2).
	net, mnt string
	netFile  *os.File
	// hostNet is this process's own network namespace, open for setns(2).
	hostNet *os.File
	// mntID is what /proc/<pid>/ns/mnt links to for a process in the mount namespace.
	mntID string
}

// NewNamespaces makes the namespaces and waits until their holder runs in them.
func NewNamespaces(ctx context.Context) (*Namespaces, error) {
	ownNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return nil, err
	}
	ownMnt, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("unshare", "--net", "--mount", "--propagation", "slave", "sleep", "infinity")
	// The holder must not outlive a test binary that dies without calling Close.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting unshare: %w", err)
	}
	n := &Namespaces{holder: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(n.exited)
	}()
	proc := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid))
	n.net, n.mnt = filepath.Join(proc, "ns", "net"), filepath.Join(proc, "ns", "mnt")
	// unshare(1) makes the namespaces, sets the propagation and only then runs sleep.
	err = testenv.Poll(ctx, 10*time.Second, 10*time.Millisecond, func() error {
		select {
		case <-n.exited:
			return testenv.Halt(errors.New("unshare exited"))
		default:
		}
		comm, err := os.ReadFile(filepath.Join(proc, "comm"))
		if err != nil {
			return err
		}
		netID, _ := os.Readlink(n.net)
		mntID, _ := os.Readlink(n.mnt)
		if strings.TrimSpace(string(comm)) != "sleep" || netID == ownNet || mntID == ownMnt {
			return errors.New("the holder is not in its namespaces yet")
		}
		n.mntID = mntID
		return nil
	})
	if err == nil {
		n.netFile, err = os.Open(n.net)
	}
	if err == nil {
		n.hostNet, err = os.Open("/proc/self/ns/net")
	}
	if err != nil {
		n.kill()
		return nil, fmt.Errorf("making the node's namespaces: %w", err)
	}
	return n, nil
}

// Wrap returns a command line that runs argv in the namespaces, in this process's working
// directory.
func (n *Namespaces) Wrap(argv []string) []string {
	wd, err := os.Getwd()
	if err != nil {
		wd = "/"
	}
	return n.WrapIn(wd, argv)
}

// WrapIn returns a command line that runs argv in the namespaces, in the directory dir. nsenter
// starts a program that enters a mount namespace in its root directory, whatever exec.Cmd.Dir
// says, and its --wd opens the directory before it enters, which leaves the program a working
// directory that getcwd(2) cannot name (Go's os.Getwd fails); a shell that changes to dir once
// inside, then execs argv, gives it one that it can.
func (n *Namespaces) WrapIn(dir string, argv []string) []string {
	return append([]string{"nsenter", "--net=" + n.net, "--mount=" + n.mnt, "--",
		"/bin/sh", "-c", `cd -- "$0" && exec "$@"`, dir}, argv...)
}

// Run runs argv in the namespaces and returns its error with its output.
func (n *Namespaces) Run(argv ...string) error {
	_, err := n.Output(argv...)
	return err
}

// Output runs argv in the namespaces and returns its output.
func (n *Namespaces) Output(argv ...string) (string, error) {
	w := n.Wrap(argv)
	out, err := exec.Command(w[0], w[1:]...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

// inNet calls f on a thread that has entered the network namespace. A socket that f makes
// belongs to that namespace for its whole life, whichever thread uses it later. The thread then
// goes back to the host's namespace before other goroutines may run on it; were it to end
// instead (a locked goroutine's thread ends with it), the programs that it had started would get
// their parent-death signal (Pdeathsig is bound to the thread that forked).
func (n *Namespaces) inNet(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(n.netFile.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering the node's network namespace: %w", err)
			return
		}
		err := f()
		if rerr := unix.Setns(int(n.hostNet.Fd()), unix.CLONE_NEWNET); rerr == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// DialContext connects to addr inside the network namespace: how this process, which stays in
// the host's, talks to the node's programs.
func (n *Namespaces) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.inNet(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen binds addr inside the network namespace.
func (n *Namespaces) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.inNet(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// InNetwork tells whether process pid runs in the network namespace.
func (n *Namespaces) InNetwork(pid int) bool {
	id, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
	want, err2 := os.Readlink(n.net)
	return err == nil && err2 == nil && id == want
}

// Pids returns the processes that run in the mount namespace: the holder and every program of
// the node with what it started (containerd's shims among them). Containers run in mount
// namespaces of their own; the node's cgroup finds those (Cluster.Stop).
func (n *Namespaces) Pids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if id, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt")); err == nil && id == n.mntID {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Close kills every process in the mount namespace, the holder last, and waits until the holder
// has exited: with no process and no mount left in them, the kernel frees both namespaces,
// and with the network namespace its interfaces, addresses and iptables rules.
func (n *Namespaces) Close() error {
	err := testenv.Poll(context.Background(), 10*time.Second, 100*time.Millisecond, func() error {
		others := 0
		for _, pid := range n.Pids() {
			if pid != n.holder.Process.Pid {
				others++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if others > 0 {
			return fmt.Errorf("%d processes of the node still run", others)
		}
		return nil
	})
	n.kill()
	for _, f := range []*os.File{n.netFile, n.hostNet} {
		if f != nil {
			f.Close()
		}
	}
	return err
}

func (n *Namespaces) kill() {
	_ = n.holder.Process.Kill()
	<-n.exited
}
