package store

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// gateFile is a file in the store directory through which waiting processes
// announce themselves. Badger's own lock says nothing about waiters, and a
// reader that keeps the directory open under steady traffic would otherwise
// keep a writer out for ever.
//
// A process that wants the directory takes the gate (shared for a reader,
// exclusive for a writer) before it tries to open Badger, keeps it while it
// retries, rings it (writes to it) after every failed open, and leaves it
// once Badger is open. A process holding Badger hears the ring through
// inotify (without inotify, it looks at the end of each of its calls) and
// probes the gate with the lock a conflicting waiter would hold: a reader
// checks for a waiting writer, a writer for any waiter. When the probe fails it stops admitting calls and
// closes as soon as the calls in flight end. Readers therefore share the
// directory with each other but give way to a writer, and a writer gives way
// to whoever waits next. flock locks disappear with the process, so a crash
// leaves nothing to clean up.
const gateFile = "reflector.gate"

type gate struct{ f *os.File }

// openGate opens the gate file, or returns a nil gate when the directory
// does not allow it; the store then works without fairness between
// processes.
func openGate(dir string) *gate {
	f, err := os.OpenFile(filepath.Join(dir, gateFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		if f, err = os.Open(filepath.Join(dir, gateFile)); err != nil {
			return nil
		}
	}
	return &gate{f: f}
}

func (g *gate) flock(how int) bool {
	for {
		err := syscall.Flock(int(g.f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err == nil
		}
	}
}

// enter announces a waiter; it fails while a conflicting waiter is announced.
func (g *gate) enter(write bool) bool {
	if g == nil {
		return true
	}
	return g.flock(lockHow(write))
}

// ring tells the holders that a waiter could not open the directory.
func (g *gate) ring() {
	if g != nil {
		_, _ = g.f.WriteAt([]byte{0}, 0)
	}
}

// leave withdraws the announcement.
func (g *gate) leave() {
	if g != nil {
		_ = syscall.Flock(int(g.f.Fd()), syscall.LOCK_UN)
	}
}

// waiting reports whether another process waits for a holder of the given
// mode to give the directory up.
func (g *gate) waiting(write bool) bool {
	if g == nil || !g.flock(lockHow(write)) {
		return g != nil
	}
	g.leave()
	return false
}

func (g *gate) close() {
	if g != nil {
		_ = g.f.Close()
	}
}

// lockHow is the gate lock of a waiter: readers only keep out writers.
func lockHow(write bool) int {
	if write {
		return syscall.LOCK_EX
	}
	return syscall.LOCK_SH
}

// rings is an inotify watch of the gate file, through which a holder hears
// waiters ring. Inotify reports only writes made on the node's own kernel;
// the store's volume is ReadWriteOnce and every process that shares it runs
// on that node (knative/store.yaml). f is nil without inotify.
type rings struct{ f *os.File }

// listen calls heard after each write to the gate file until stop. Without
// inotify (no instance or watch left) it says so once and hears nothing:
// holders then see waiters only at the end of their calls and of their
// linger.
func listen(path string, heard func(), log *slog.Logger) *rings {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err == nil {
		if _, err = unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
			_ = unix.Close(fd)
		}
	}
	if err != nil {
		log.Warn("no inotify for the tag store: waiting processes are seen at the end of calls and of the linger",
			"gate", path, "error", err)
		return &rings{}
	}
	// Non-blocking, so that Go's poller serves the reads and Close ends them.
	r := &rings{f: os.NewFile(uintptr(fd), "inotify "+path)}
	go func() {
		for buf := make([]byte, 4096); ; {
			if _, err := r.f.Read(buf); err != nil {
				return
			}
			heard()
		}
	}()
	return r
}

// stop ends the watch. The kernel takes its time to release an inotify
// instance (up to 0.4 s measured under load), and nobody needs to wait.
func (r *rings) stop() {
	if r != nil && r.f != nil {
		go r.f.Close()
	}
}
