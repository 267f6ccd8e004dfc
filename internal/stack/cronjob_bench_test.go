package stack_test

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
)

// cronPasses is what the cron reconciler held and spent while cronJob ran it: the passes that
// ran, the largest peak RSS (VmHWM) of one as read while it ran, RSS and its anonymous part
// integrated over the time each pass ran, in MiB·s, the passes' time from exec to exit and their
// CPU time. The peak is read from /proc, not from the exit's rusage: a child forked from this
// process carries its parent's memory in ru_maxrss until it executes the cron's binary.
type cronPasses struct {
	passes, failed int
	peakMiB        float64
	rssMiBs        float64
	anonMiBs       float64
	seconds        float64
	cpuSeconds     float64
}

// cronJobSample is how often cronJob reads the memory of a running pass: a pass that finds
// nothing due lasts some 20 ms from exec to exit.
const cronJobSample = 2 * time.Millisecond

// cronJob runs the cron reconciler of s as knative/cron.yaml deploys it: a CronJob whose Job
// starts a new `cron --once` process each period, which exits at the end of its pass, so that
// between passes the reconciler holds no memory at all. The stack's own cron runs as a loop
// that holds its memory all the time; the caller stops that one first (Kill). The first pass
// starts half a period after cronJob, then one each period; stop waits for a pass under way and
// returns what the passes held.
func cronJob(b *testing.B, s *stack.Stack, period time.Duration) (stop func() cronPasses) {
	b.Helper()
	done := make(chan struct{})
	result := make(chan cronPasses)
	go func() {
		var out cronPasses
		next := time.NewTimer(period / 2)
		defer next.Stop()
		for {
			select {
			case <-done:
				result <- out
				return
			case <-next.C:
			}
			next.Reset(period)
			runPass(b, s, &out)
		}
	}()
	return func() cronPasses {
		close(done)
		return <-result
	}
}

// runPass runs one `cron --once` process of s to its end and adds what it held to out.
func runPass(b *testing.B, s *stack.Stack, out *cronPasses) {
	cmd, err := s.Command(stack.Cron)
	if err != nil {
		b.Error(err)
		return
	}
	cmd.Args = append(slices.Clone(cmd.Args), "--once")
	logFile, err := os.OpenFile(s.Log(stack.Cron), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Error(err)
		return
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Error(err)
		return
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t := time.NewTicker(cronJobSample)
	defer t.Stop()
	began := time.Now()
	last := began
	var rss, anon float64
	for {
		// Each reading stands for the interval before it: the process held at least that much
		// since the previous one, from its start.
		if hwm, _, err := memory(cmd.Process.Pid); err == nil {
			out.peakMiB = max(out.peakMiB, float64(hwm)/1024)
		}
		if r, err := rollup(cmd.Process.Pid); err == nil {
			now := time.Now()
			rss, anon = float64(r["Rss"])/1024, float64(r["Anonymous"])/1024
			out.rssMiBs += rss * now.Sub(last).Seconds()
			out.anonMiBs += anon * now.Sub(last).Seconds()
			last = now
		}
		select {
		case err := <-exited:
			// The interval since the last reading, at the last reading's size.
			out.rssMiBs += rss * time.Since(last).Seconds()
			out.anonMiBs += anon * time.Since(last).Seconds()
			out.passes++
			out.seconds += time.Since(began).Seconds()
			if err != nil {
				out.failed++
				b.Errorf("a cron --once pass failed: %v; its log is %s", err, s.Log(stack.Cron))
			}
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				out.cpuSeconds += time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
			}
			return
		case <-t.C:
		}
	}
}
