package store

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// runHelper runs one helper role and returns the process exit code.
func runHelper(role, dir, arg string) int {
	switch role {
	case "writer":
		return writerRole(dir, arg)
	case "reader":
		return readerRole(dir)
	case "bigwriter":
		return bigWriterRole(dir)
	case "holder":
		return holderRole(dir)
	case "rss":
		return rssRole(dir, arg)
	}
	return fail("unknown helper role %q", role)
}

func printJSON(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// writerRole runs n writes as writer id ("a" or "b"): "a" alternates a Put
// of the next generation of ns/put with a Push of "a-<i>" to ns/add,
// "b" only adds "b-<i>". Every write must succeed.
func writerRole(dir, arg string) int {
	id, nStr, _ := strings.Cut(arg, ":")
	n, _ := strconv.Atoi(nStr)
	s := New(dir)
	defer s.Close()
	var lat []time.Duration
	for i := range n {
		ctx, cancel := opCtx()
		start := time.Now()
		var err error
		if id == "a" && i%2 == 0 {
			_, _, err = s.Put(ctx, "ns/put", testID, genTags(i/2+1, smallGen(i/2+1)), time.Now())
		} else {
			_, err = s.Push(ctx, "ns/add", testID, []string{fmt.Sprintf("%s-%d", id, i)}, "")
		}
		cancel()
		lat = append(lat, time.Since(start))
		if err != nil {
			return fail("writer %s op %d: %v", id, i, err)
		}
	}
	if err := s.Close(); err != nil {
		return fail("writer %s close: %v", id, err)
	}
	printJSON(summarize(lat, 0, 0))
	return 0
}

// readerRole reads both test keys until stdin closes, checking that every
// entry is whole, that generations never go back and that added tags never
// disappear. Its summary covers the reads that had to wait for the
// directory (over a millisecond).
func readerRole(dir string) int {
	stop := stdinClosed()
	s := New(dir, ReadOnly())
	defer s.Close()
	var waits []time.Duration
	lastGen, lastAdded, reads := 0, 0, 0
	var revs revisions
	for !stopped(stop) {
		ctx, cancel := opCtx()
		start := time.Now()
		e, err := s.Get(ctx, "ns/put", testID)
		var a Entry
		if err == nil {
			a, err = s.Get(ctx, "ns/add", testID)
		}
		cancel()
		if d := time.Since(start); d > time.Millisecond {
			waits = append(waits, d)
		}
		reads++
		if err != nil {
			return fail("reader: %v", err)
		}
		g, err := checkGen(e, smallGen)
		if err != nil {
			return fail("reader: ns/put: %v", err)
		}
		if g < lastGen {
			return fail("reader: generation went back from %d to %d", lastGen, g)
		}
		lastGen = g
		if err := revs.check(a); err != nil {
			return fail("reader: ns/add: %v", err)
		}
		if len(a.Tags) < lastAdded {
			return fail("reader: ns/add lost tags: %d after %d", len(a.Tags), lastAdded)
		}
		lastAdded = len(a.Tags)
		if reads == 1 {
			// Tells the parent that this reader holds or contends for the directory now.
			fmt.Println("reading")
		}
	}
	if err := s.Close(); err != nil {
		return fail("reader close: %v", err)
	}
	sum := summarize(waits, 0, int64(lastGen))
	sum.Ops = reads
	printJSON(sum)
	return 0
}

// bigWriterRole writes ever newer 100k-tag generations of ns/big, printing
// each generation once it is committed, until it is killed.
func bigWriterRole(dir string) int {
	s := New(dir)
	for g := 1; ; g++ {
		ctx, cancel := opCtx()
		_, _, err := s.Put(ctx, "ns/big", testID, genTags(g, bigGen(g)), time.Now())
		cancel()
		if err != nil {
			return fail("bigwriter generation %d: %v", g, err)
		}
		fmt.Println(g)
	}
}

// holderRole keeps the directory open read-write until stdin closes.
func holderRole(dir string) int {
	stop := stdinClosed()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		return fail("holder: %v", err)
	}
	fmt.Println("ready")
	<-stop
	if err := db.Close(); err != nil {
		return fail("holder close: %v", err)
	}
	fmt.Println("closed")
	return 0
}

// rssRole writes 1,000 repositories of 1,000 tags and prints its peak RSS
// in KiB. arg is the number of writes before the writer lets the directory go as at the end of a burst of events (so it
// tidies the value log); 1000 is one long session, as the cron reconciler
// would hold.
func rssRole(dir, arg string) int {
	session, err := strconv.Atoi(arg)
	if err != nil {
		return fail("rss: bad argument %q", arg)
	}
	s := New(dir, WithLinger(time.Hour), WithLogger(slog.New(slog.DiscardHandler)))
	for r := range 1000 {
		ctx, cancel := opCtx()
		tags := make([]string, 1000)
		for j := range tags {
			tags[j] = fmt.Sprintf("v1.%d.%d-%07x", j/100, j%100, r*1000+j)
		}
		_, _, err := s.Put(ctx, fmt.Sprintf("ns%d/repo%d", r%50, r), testID, tags, time.Now())
		cancel()
		if err != nil {
			return fail("rss: %v", err)
		}
		if r%session == session-1 {
			endSession(s)
		}
	}
	if err := s.Close(); err != nil {
		return fail("rss close: %v", err)
	}
	hwm, err := peakRSS()
	if err != nil {
		return fail("rss: %v", err)
	}
	fmt.Println(hwm)
	return 0
}

// endSession lets the Store's linger run out now and waits for the idle
// close, which is the one that tidies.
func endSession(s *Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	linger := s.opts.linger
	s.opts.linger = 0
	s.look(false)
	for s.state != stateIdle {
		ch := s.changed
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	s.opts.linger = linger
}

// peakRSS reads the process's peak resident set size in KiB.
func peakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
