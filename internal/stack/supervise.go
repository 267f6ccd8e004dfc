package stack

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/imagereflector/reflector/internal/testenv"
)

// The restart backoff of a component whose process exits on its own, as a kubelet's
// CrashLoopBackOff and Knative's revisions have it: a process that keeps dying waits longer each
// time, up to a cap, and one that stayed up long enough is forgiven its earlier exits.
const (
	backoffFirst = 500 * time.Millisecond
	backoffMax   = 10 * time.Second
	backoffReset = 30 * time.Second
)

// backoff returns how long to wait before starting again a process that exited after running for
// up, given the wait before its previous restart (zero when there was none).
func backoff(prev, up time.Duration) time.Duration {
	if prev <= 0 || up >= backoffReset {
		return backoffFirst
	}
	return min(2*prev, backoffMax)
}

// State says whether a component's process runs.
type State string

// States of a component.
const (
	// Up: its process runs.
	Up State = "up"
	// Down: Kill or Stop stopped it, and the Stack leaves it stopped.
	Down State = "down"
	// Restarting: its process exited on its own, and the Stack starts a new one after a backoff.
	Restarting State = "restarting"
)

// Status is what the Stack knows of one of its components.
type Status struct {
	State State
	// PID is the process id when Up.
	PID int
	// Restarts counts the processes the Stack started after one exited on its own; starts by
	// Start and Restart do not count.
	Restarts int
	// RestartIn is the time left before the next start when Restarting.
	RestartIn time.Duration
	// LastExit says how the last process that exited on its own ended ("signal: killed").
	LastExit string
}

// Components returns the components the Stack runs as processes and restarts, in start order.
func Components() []string {
	return []string{Registry, Policy, Scan, Cron, SourceScan, SourcePolicy}
}

// proc is one process of a component.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{} // closed once the process has exited and been waited for
}

// component is the Stack's record of one component.
type component struct {
	proc *proc // nil unless Up
	// gen changes whenever Kill or Restart takes the component over, so that a restart that
	// was pending for an earlier process gives up.
	gen       int
	restartAt time.Time // non-zero while Restarting
	delay     time.Duration
	restarts  int
	lastExit  string
}

// Status returns the state of component c.
func (s *Stack) Status(c string) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	comp := s.comps[c]
	if comp == nil {
		return Status{State: Down}
	}
	st := Status{State: Down, Restarts: comp.restarts, LastExit: comp.lastExit}
	switch {
	case comp.proc != nil:
		st.State, st.PID = Up, comp.proc.cmd.Process.Pid
	case !comp.restartAt.IsZero():
		st.State, st.RestartIn = Restarting, max(time.Until(comp.restartAt), 0)
	}
	return st
}

// spawn starts a process of component c and has it supervised; it returns how to tell that
// the process is ready, if c has a way. The caller holds s.mu.
func (s *Stack) spawn(c string) (*proc, ready, error) {
	cmd, ready, err := s.withEnv(c)
	if err != nil {
		return nil, nil, err
	}
	logFile, err := os.OpenFile(s.Log(c), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A group of its own: the terminal's Ctrl-C reaches only `make run`, which stops the
	// processes in order, rather than every process at once, each exit seen as a crash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.bind(c); err != nil {
		return nil, nil, err
	}
	if err := testenv.StartWithListeners(cmd, s.listeners[c]...); err != nil {
		return nil, nil, err
	}
	p := &proc{cmd: cmd, started: time.Now(), exited: make(chan struct{})}
	comp := s.comps[c]
	if comp == nil {
		comp = &component{}
		s.comps[c] = comp
	}
	comp.proc, comp.restartAt = p, time.Time{}
	go s.supervise(c, p)
	return p, ready, nil
}

// supervise waits for process p of component c and, unless Kill or Stop ended it (a crash, an
// exit, a signal from outside), has a new one started after the backoff.
func (s *Stack) supervise(c string, p *proc) {
	err := p.cmd.Wait()
	close(p.exited)
	s.mu.Lock()
	comp := s.comps[c]
	if s.stopping || comp.proc != p {
		s.mu.Unlock()
		return
	}
	up := time.Since(p.started)
	comp.proc = nil
	comp.lastExit = exitString(err)
	comp.delay = backoff(comp.delay, up)
	comp.restartAt = time.Now().Add(comp.delay)
	gen, delay := comp.gen, comp.delay
	s.mu.Unlock()
	s.log(c, slog.LevelWarn, "process exited; the stack starts a new one", "pid", p.cmd.Process.Pid,
		"exit", exitString(err), "uptime", up.Round(time.Millisecond).String(), "restart_in", delay.String())
	s.restart(c, gen, delay)
}

// restart starts a new process of component c after delay, and keeps trying with the backoff
// while starting fails, unless Kill, Restart or Stop took the component over (gen changed).
func (s *Stack) restart(c string, gen int, delay time.Duration) {
	for {
		select {
		case <-s.done:
			return
		case <-time.After(delay):
		}
		s.mu.Lock()
		comp := s.comps[c]
		if s.stopping || comp.gen != gen {
			s.mu.Unlock()
			return
		}
		next, _, err := s.spawn(c)
		if err == nil {
			comp.restarts++
			n := comp.restarts
			s.mu.Unlock()
			s.log(c, slog.LevelInfo, "the stack started a new process", "pid", next.cmd.Process.Pid, "restarts", n)
			return
		}
		comp.lastExit = "start: " + err.Error()
		comp.delay = backoff(comp.delay, 0)
		comp.restartAt = time.Now().Add(comp.delay)
		delay = comp.delay
		s.mu.Unlock()
		s.log(c, slog.LevelWarn, "the stack could not start a new process", "error", err.Error(), "restart_in", delay.String())
	}
}

// exitString says how a process ended, from the error of its Wait.
func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// log appends a line to component c's log in the functions' JSON format, so that a person who
// reads the log sees the restarts among the process's own lines.
func (s *Stack) log(c string, level slog.Level, msg string, args ...any) {
	f, err := os.OpenFile(s.Log(c), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	slog.New(slog.NewJSONHandler(f, nil)).Log(context.Background(), level, msg,
		append([]any{"component", c, "source", "stack"}, args...)...)
}
