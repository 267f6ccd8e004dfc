package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// addition is what push did to an entry: the revision the tags were added to, the tags that
// were new, and the entry as Get reads it afterwards.
type addition struct {
	Entry Entry
	From  string
	Tags  []string
}

// push adds tags to the entry of key listed for id with Push, as the scan of a push event does,
// and reads the entry back, which must have the revision Push wrote: for a test that is the
// only writer of key.
func push(ctx context.Context, s *Store, key string, id Identity, tags []string) (addition, error) {
	p, err := s.Push(ctx, key, id, tags, "")
	if err != nil {
		return addition{}, err
	}
	e, err := s.Get(ctx, key, id)
	if err == nil && e.Revision != p.Revision {
		err = fmt.Errorf("Get after Push read revision %s, Push wrote %s", e.Revision, p.Revision)
	}
	return addition{Entry: e, From: p.From, Tags: p.Tags}, err
}

// The test binary re-executes itself as a helper process when envRole is
// set, so that tests can put real processes on one directory.
const (
	envRole = "STORE_TEST_ROLE"
	envDir  = "STORE_TEST_DIR"
	envArg  = "STORE_TEST_ARG"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runHelper(role, os.Getenv(envDir), os.Getenv(envArg)))
	}
	os.Exit(m.Run())
}

// helper is a running helper process. It prints one line per event on
// stdout and stops when its stdin closes.
type helper struct {
	t      testing.TB
	role   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *bytes.Buffer
}

func startHelper(t testing.TB, role, dir, arg string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envDir+"="+dir, envArg+"="+arg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, role: role, cmd: cmd, stdin: stdin, lines: make(chan string, 1024), stderr: &bytes.Buffer{}}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		if h.cmd.ProcessState == nil {
			_ = h.cmd.Process.Kill()
			_ = h.cmd.Wait()
		}
	})
	return h
}

// next returns the helper's next line, failing the test if it exits first.
func (h *helper) next() string {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			err := h.cmd.Wait()
			h.t.Fatalf("helper %s exited (%v) before printing; stderr:\n%s", h.role, err, h.stderr)
		}
		return l
	case <-time.After(2 * time.Minute):
		h.t.Fatalf("helper %s printed nothing for 2 minutes; stderr:\n%s", h.role, h.stderr)
	}
	return ""
}

// stop closes the helper's stdin and waits for it; it returns the last line
// printed, which holds the helper's summary.
func (h *helper) stop() string {
	h.t.Helper()
	_ = h.stdin.Close()
	var last string
	for l := range h.lines {
		last = l
	}
	if err := h.cmd.Wait(); err != nil {
		h.t.Fatalf("helper %s: %v; stderr:\n%s", h.role, err, h.stderr)
	}
	return last
}

// summary is what helpers that run a workload print last.
type summary struct {
	Ops    int     `json:"ops"`
	Errors int     `json:"errors"`
	P50ms  float64 `json:"p50ms"`
	P99ms  float64 `json:"p99ms"`
	MaxMs  float64 `json:"maxms"`
	Extra  int64   `json:"extra"`
}

func (h *helper) summary() summary {
	h.t.Helper()
	var s summary
	line := h.stop()
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		h.t.Fatalf("helper %s printed %q: %v", h.role, line, err)
	}
	return s
}

func summarize(lat []time.Duration, errors int, extra int64) summary {
	s := summary{Ops: len(lat), Errors: errors, Extra: extra}
	if len(lat) > 0 {
		slices.Sort(lat)
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		s.P50ms, s.P99ms, s.MaxMs = ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1])
	}
	return s
}

// stdinClosed is closed when the helper's stdin reaches EOF.
func stdinClosed() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(ch)
	}()
	return ch
}

func stopped(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// opCtx bounds one call of a helper: long enough that only a starved
// process fails.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

// seedRoles writes generation 0 of the two keys that the reader and writer
// roles use.
func seedRoles(tb testing.TB, dir string) {
	tb.Helper()
	s := New(dir)
	for _, k := range []string{"ns/put", "ns/add"} {
		if _, _, err := s.Put(context.Background(), k, testID, genTags(0, smallGen(0)), time.Now()); err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// genTags is generation g of a list whose every tag names g, so that a list
// mixing two writes is detectable.
func genTags(g, n int) []string {
	tags := make([]string, 0, n+1)
	tags = append(tags, fmt.Sprintf("gen-%08d", g))
	for j := range n {
		tags = append(tags, fmt.Sprintf("g%d-%d", g, j))
	}
	return tags
}

// checkGen verifies that e is exactly one generation and returns it.
func checkGen(e Entry, n func(g int) int) (int, error) {
	if len(e.Tags) == 0 || !strings.HasPrefix(e.Tags[len(e.Tags)-1], "gen-") {
		return 0, fmt.Errorf("no generation marker in %d tags", len(e.Tags))
	}
	g, err := strconv.Atoi(strings.TrimPrefix(e.Tags[len(e.Tags)-1], "gen-"))
	if err != nil {
		return 0, err
	}
	if want := normalize(genTags(g, n(g))); !slices.Equal(e.Tags, want) {
		return g, fmt.Errorf("generation %d: %d tags, want %d: torn or mixed", g, len(e.Tags), len(want))
	}
	if e.Revision != RevisionOf(e.Tags) {
		return g, fmt.Errorf("generation %d: revision %s does not match its tags", g, e.Revision)
	}
	return g, nil
}

// revisions records the list each revision read named: a revision names one
// list, however often and by whom it is read. After additions a revision is
// no longer RevisionOf its list (RevisionAfter), so this is what a reader can
// check of an entry that Push wrote.
type revisions struct {
	mu    sync.Mutex
	lists map[string][]string
}

// check records e and fails when its revision named another list before.
func (r *revisions) check(e Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lists == nil {
		r.lists = map[string][]string{}
	}
	if prev, ok := r.lists[e.Revision]; ok && !slices.Equal(prev, e.Tags) {
		return fmt.Errorf("revision %s named %d tags and now %d", e.Revision, len(prev), len(e.Tags))
	}
	r.lists[e.Revision] = slices.Clone(e.Tags)
	return nil
}

// smallGen is the size of generation g of the list the writers test.
func smallGen(g int) int { return 10 + (g*37)%400 }

// bigGen is the size of generation g of the list killed writers write.
func bigGen(int) int { return 100_000 }

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	return 1
}
