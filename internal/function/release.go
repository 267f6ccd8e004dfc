package function

import (
	"bufio"
	"bytes"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ReleaseEveryEnv names how often a function gives back memory it holds but does not need:
// REFLECTOR_RELEASE_EVERY, a duration; "off" or 0 for never.
const ReleaseEveryEnv = "REFLECTOR_RELEASE_EVERY"

// SteadyGCPercentEnv names the collector's target (as GOGC) from the first release on:
// REFLECTOR_STEADY_GOGC, 100 when unset; 0 or less keeps GOGC's.
const SteadyGCPercentEnv = "REFLECTOR_STEADY_GOGC"

// DefaultReleaseEvery is the period when REFLECTOR_RELEASE_EVERY is unset.
const DefaultReleaseEvery = 30 * time.Second

// ReleaseEvery returns the release period from the environment, zero for never.
func ReleaseEvery(getenv func(string) string) time.Duration {
	v := getenv(ReleaseEveryEnv)
	if v == "" {
		return DefaultReleaseEvery
	}
	if v == "off" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return DefaultReleaseEvery
	}
	return d
}

// Release starts giving back, every period (none when zero), the memory the process holds
// but has not needed since the last time: the pages of its own executable that it read
// since (starting, it touches code and tables of every package it links, most of which it
// never needs again; they stay in the page cache, shared and evictable, and a later call
// maps them again from there), and the free part of the Go heap. The first release comes a
// few seconds after the start; from then on the collector's target is REFLECTOR_STEADY_GOGC.
// It stops when stop is closed.
func Release(period time.Duration, log *slog.Logger, stop <-chan struct{}) {
	if period <= 0 {
		return
	}
	steadyGCPercent := 100
	if v := os.Getenv(SteadyGCPercentEnv); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			steadyGCPercent = n
		}
	}
	go func() {
		t := time.NewTimer(min(period, 5*time.Second))
		defer t.Stop()
		first := true
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if n, err := releaseExecutable(); err != nil {
				log.Debug("the executable's pages were not released", "error", err.Error())
			} else {
				log.Debug("released the executable's pages", "bytes", n)
			}
			if first {
				// GOGC=400 (knative/) spares a start the collections that would free
				// nothing; once started, the heap need not grow to five times what is live.
				if steadyGCPercent > 0 {
					debug.SetGCPercent(steadyGCPercent)
				}
				first = false
			}
			debug.FreeOSMemory()
			t.Reset(period)
		}
	}()
}

// releaseExecutable drops from the resident set the read-only pages of the process's
// executable that hold the file's contents unchanged. Mappings that are writable, or that
// hold a private copy of a page (the dynamic linker's relocations, made read-only after),
// are left alone: dropping them would lose what was written. It returns the bytes released.
func releaseExecutable() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	type mapping struct {
		start, end uintptr
		rss        int64
		ok         bool
	}
	var (
		maps []mapping
		cur  *mapping
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4 {
			maps = append(maps, mapping{})
			cur = &maps[len(maps)-1]
			lo, hi, _ := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			path := ""
			if len(f) >= 6 {
				path = strings.Join(f[5:], " ")
			}
			cur.start, cur.end = uintptr(start), uintptr(end)
			cur.ok = err1 == nil && err2 == nil && path == exe && f[1][1] == '-' && f[1][3] == 'p'
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			cur.rss = kb << 10
		// A private copy of a file page counts as anonymous (or swapped); a page of the
		// file itself may be dirty in the page cache (a binary just written), which is
		// the page cache's to write back, not this mapping's.
		case "Anonymous:", "Swap:":
			if kb != 0 {
				cur.ok = false
			}
		}
	}
	var released int64
	for _, m := range maps {
		if !m.ok || m.rss == 0 {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return released, errno
		}
		released += m.rss
	}
	return released, nil
}
