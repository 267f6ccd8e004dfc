package stack_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sys/unix"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// damageFile flips 64 bytes of the first file in dir whose name ends in suffix, at the offset
// that where returns for its content.
func damageFile(t *testing.T, dir, suffix string, where func([]byte) int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		off := where(b)
		if off < 0 || off+16 > len(b) {
			t.Fatalf("%s has %d bytes, too few to damage at %d", p, len(b), off)
		}
		for i := off; i < off+64 && i < len(b); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("damaged %s (%d bytes) at %d", e.Name(), len(b), off)
		return
	}
	t.Fatalf("no file *%s in %s", suffix, dir)
}

// lastBlockTrailer is where the last 64 bytes of a Badger table's last block start: its entry
// offsets and count, checksum and checksum length, followed by the index, its length, its
// checksum and that checksum's length. Badger (v4.9) alone dies in a goroutine of its own on
// such a damage, at every open.
func lastBlockTrailer(b []byte) int {
	n := len(b)
	sumLen := int(binary.BigEndian.Uint32(b[n-4:]))
	indexLen := int(binary.BigEndian.Uint32(b[n-8-sumLen:]))
	return n - 8 - sumLen - indexLen - 64
}

// latestGuard fails the test if the policy's latestRef is ever seen other than one of the tags
// it is allowed to show, while the guard runs.
func latestGuard(t *testing.T, s *stack.Stack, policy string, allowed ...string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			p, err := s.Kube.Policies.Get(context.Background(), "default", policy)
			if err != nil {
				continue
			}
			ok := false
			for _, a := range allowed {
				ok = ok || refTag(p.Status.LatestRef) == a
			}
			if !ok {
				t.Errorf("policy %s: latestRef %s, want one of %v", policy, refTag(p.Status.LatestRef), allowed)
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// objectRef names an ImageRepository or ImagePolicy of namespace default.
type objectRef struct{ kind, name string }

// waitReady waits for Ready of obj to have status and reason, and returns its message.
func waitReady(t *testing.T, s *stack.Stack, obj objectRef, status, reason string) string {
	t.Helper()
	kind, name := obj.kind, obj.name
	var msg string
	testenv.Eventually(t, 90*time.Second, func() error {
		ctx := context.Background()
		var conds []metav1.Condition
		switch kind {
		case v1.ImageRepositoryKind:
			r, err := s.Kube.Repositories.Get(ctx, "default", name)
			if err != nil {
				return err
			}
			conds = r.Status.Conditions
		default:
			p, err := s.Kube.Policies.Get(ctx, "default", name)
			if err != nil {
				return err
			}
			conds = p.Status.Conditions
		}
		ready := apimeta.FindStatusCondition(conds, v1.ReadyCondition)
		if ready == nil || string(ready.Status) != status || ready.Reason != reason {
			return fmt.Errorf("%s %s: Ready %+v, want %s %s; logs in %s", kind, name, ready, status, reason, filepath.Dir(s.Log(stack.Scan)))
		}
		msg = ready.Message
		return nil
	})
	return msg
}

// countLines counts the lines of a component's log that contain text.
func countLines(t *testing.T, s *stack.Stack, c, text string) int {
	t.Helper()
	b, err := os.ReadFile(s.Log(c))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), text)
}

// TestDamagedStoreHealsIntegration damages a file of the tag store that the running functions
// share, while they are stopped, as a node's crash or a bad disk would, and starts the policy
// function alone first: it reports the damage on the policy it evaluates (TagStoreDamaged,
// latestRef kept) and moves nothing. Then the scan function and the cron reconciler come back:
// the first writer sets the directory aside and starts an empty store, the cron reconciler has
// the repository listed again, and the policy is Ready with the same latestRef, then follows a
// push, without anyone's help, and no process exits. Each damage is logged once and counted.
// One stack takes the damages in turn: MANIFEST, a value-log file, a table's index, a table's
// first block, which Badger alone would pass over as a key it does not have, so that the policy
// function took the repository for one never scanned, and the trailer of a table's last block,
// on which Badger alone kills every process that opens the directory.
func TestDamagedStoreHealsIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: 2 * time.Second})
	image := s.Registry + "/damage/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(observedManifests, image))); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "stable", "1.0.0")
	stop := latestGuard(t, s, "stable", "1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0")
	defer stop()

	for i, d := range []struct {
		name, suffix string
		where        func([]byte) int
	}{
		{"manifest", "MANIFEST", func([]byte) int { return 8 }},
		{"value log", ".vlog", func([]byte) int { return 0 }},
		{"table index", ".sst", func(b []byte) int { return len(b) - 200 }},
		{"table block", ".sst", func([]byte) int { return 16 }},
		{"table block trailer", ".sst", lastBlockTrailer},
	} {
		for _, c := range []string{stack.Cron, stack.Scan, stack.Policy} {
			if err := s.Kill(c, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
		damageFile(t, s.StoreDir(), d.suffix, d.where)

		if err := s.Restart(ctx, stack.Policy); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Kube.Policies.RequestReconcile(ctx, "default", "stable", time.Now().Format(time.RFC3339Nano)); err != nil {
			t.Fatal(err)
		}
		msg := waitReady(t, s, objectRef{v1.ImagePolicyKind, "stable"}, "False", v1.TagStoreDamagedReason)
		if !strings.Contains(msg, "tag store is unreadable") {
			t.Errorf("%s: policy message %q does not say the store is unreadable", d.name, msg)
		}
		reason := filepath.Join(s.StoreDir(), "reflector.damaged", "REASON")
		before, _ := os.ReadFile(reason)

		back := time.Now()
		for _, c := range []string{stack.Scan, stack.Cron} {
			if err := s.Restart(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		waitReady(t, s, objectRef{v1.ImagePolicyKind, "stable"}, "True", v1.SucceededReason)
		t.Logf("%s: policy Ready again %s after the writers were started", d.name, time.Since(back).Round(10*time.Millisecond))
		waitReady(t, s, objectRef{v1.ImageRepositoryKind, "app"}, "True", v1.SucceededReason)
		if after, err := os.ReadFile(reason); err != nil || string(after) == string(before) {
			t.Errorf("%s: the aside copy's REASON is %q (%v), before the writers came %q; want a new one", d.name, after, err, before)
		}
		tag := fmt.Sprintf("1.%d.0", i+1)
		if _, err := stack.Push(image + ":" + tag); err != nil {
			t.Fatal(err)
		}
		waitLatest(t, s, "stable", tag)

		// The writers were started after the damage, so their counters count only its rebuild.
		rebuilt := 0.0
		for _, c := range []string{stack.Scan, stack.Cron} {
			v, _ := testenv.Scrape(t, s.Metrics[c]).Value("reflector_store_damage_total", map[string]string{"action": "rebuilt"})
			rebuilt += v
		}
		if rebuilt != 1 {
			t.Errorf("%s: reflector_store_damage_total{action=rebuilt} = %v over the writers, want 1", d.name, rebuilt)
		}
		lines := 0
		for _, c := range []string{stack.Scan, stack.Cron, stack.Policy} {
			lines += countLines(t, s, c, "the tag store was damaged")
		}
		if lines != i+1 {
			t.Errorf("after %s: %d log lines say the store was damaged and rebuilt, want %d, one per damage", d.name, lines, i+1)
		}
		for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
			if st := s.Status(c); st.Restarts != 0 {
				t.Errorf("after %s: %s restarted %d times (last exit %s)", d.name, c, st.Restarts, st.LastExit)
			}
		}
	}
}

// TestFullStoreIntegration runs the whole system on a tag store whose volume is a small tmpfs,
// fills the volume and pushes: the scan function cannot store the pushed tag and says so
// (Ready=False, TagStoreFull, never Ready=True nor a new lastScanResult while full), the policy
// keeps its latestRef, the cron reconciler goes on passing and meets the full volume too, no
// process exits and /healthz keeps answering. Once room returns, the cron reconciler has the repository scanned again and
// the policy moves on, without anyone's help. It mounts a tmpfs, which needs root: run it with
// REFLECTOR_FAULTS_TEST=1 (make faults-test).
func TestFullStoreIntegration(t *testing.T) {
	if os.Getenv("REFLECTOR_FAULTS_TEST") == "" {
		t.Skip("set REFLECTOR_FAULTS_TEST=1 to run the full-volume test on a small tmpfs (it mounts one, which needs root): make faults-test")
	}
	ctx := context.Background()
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store")
	if err := os.Mkdir(storeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", storeDir, "tmpfs", 0, "size=64m,mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s (%v): the full-volume test needs root", storeDir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(storeDir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", storeDir, err)
		}
	})
	s := start(t, stack.Options{Dir: dir, CronEvery: 2 * time.Second})
	if s.StoreDir() != storeDir {
		t.Fatalf("the stack's store is %s, not the tmpfs %s", s.StoreDir(), storeDir)
	}
	image := s.Registry + "/full/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(observedManifests, image))); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "stable", "1.0.0")
	stop := latestGuard(t, s, "stable", "1.0.0", "1.1.0")
	defer stop()

	// /healthz of both functions answers throughout.
	probeDone := make(chan struct{})
	var probes sync.WaitGroup
	failed := map[string]int{}
	var mu sync.Mutex
	probes.Go(func() {
		for {
			select {
			case <-probeDone:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, u := range []string{s.ScanURL, s.PolicyURL} {
				resp, err := http.Get(u + "/healthz")
				if err == nil {
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					mu.Lock()
					failed[u]++
					mu.Unlock()
				}
			}
		}
	})

	filler := filepath.Join(storeDir, "filler")
	testenv.FillVolume(t, filler, 1<<20)
	cronFullBefore, _ := testenv.Scrape(t, s.Metrics[stack.Cron]).Value("reflector_store_full_total", nil)
	passesBefore, _ := testenv.Scrape(t, s.Metrics[stack.Cron]).Value("reflector_cron_passes_total", nil)
	if _, err := stack.Push(image + ":1.1.0"); err != nil {
		t.Fatal(err)
	}
	msg := waitReady(t, s, objectRef{v1.ImageRepositoryKind, "app"}, "False", v1.TagStoreFullReason)
	if !strings.Contains(msg, "tag store is full") {
		t.Errorf("repository message %q does not say the store is full", msg)
	}
	// Several cron passes and retried deliveries against the full store, during which no
	// status may say that a scan succeeded: none of them could store its tags.
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r, err := s.Kube.Repositories.Get(ctx, "default", "app")
		if err != nil {
			continue
		}
		if c := ready(r); c.Status != metav1.ConditionFalse || c.Reason != v1.TagStoreFullReason {
			t.Fatalf("repository on a full store: Ready %s %s %q, want False %s", c.Status, c.Reason, c.Message, v1.TagStoreFullReason)
		}
		if res := r.Status.LastScanResult; res == nil || res.TagCount != 1 || strings.Join(res.LatestTags, ",") != "1.0.0" {
			t.Fatalf("repository on a full store: lastScanResult %+v, want the last stored one (1.0.0)", res)
		}
	}
	if p, err := s.Kube.Policies.Get(ctx, "default", "stable"); err != nil || refTag(p.Status.LatestRef) != "1.0.0" {
		t.Fatalf("policy on a full store: %v, %v; want latestRef 1.0.0 kept", p, err)
	}
	// The cron reconciler went on passing and met the full volume itself.
	cron := testenv.Scrape(t, s.Metrics[stack.Cron])
	cronFull, _ := cron.Value("reflector_store_full_total", nil)
	passes, _ := cron.Value("reflector_cron_passes_total", nil)
	if cronFull <= cronFullBefore || passes < passesBefore+2 {
		t.Errorf("cron reconciler on the full volume: %v refused writes (%v before), %v passes (%v before); want refusals and at least two passes",
			cronFull, cronFullBefore, passes, passesBefore)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	room := time.Now()
	waitLatest(t, s, "stable", "1.1.0")
	t.Logf("latestRef 1.1.0 %s after room returned", time.Since(room).Round(10*time.Millisecond))
	waitReady(t, s, objectRef{v1.ImageRepositoryKind, "app"}, "True", v1.SucceededReason)

	close(probeDone)
	probes.Wait()
	for u, n := range failed {
		t.Errorf("%s/healthz failed %d times", u, n)
	}
	for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
		if st := s.Status(c); st.Restarts != 0 {
			t.Errorf("%s restarted %d times (last exit %s)", c, st.Restarts, st.LastExit)
		}
	}
	full := 0.0
	for _, c := range []string{stack.Scan, stack.Cron} {
		v, _ := testenv.Scrape(t, s.Metrics[c]).Value("reflector_store_full_total", nil)
		full += v
	}
	if full == 0 {
		t.Error("reflector_store_full_total counted no refused write")
	}
	t.Logf("%v writes or writer opens refused while the volume was full", full)
}

// TestDamagedEntryHealsIntegration damages one repository's tag list inside a value-log file
// of the store the running functions share, while they are stopped: the directory opens, so
// nothing is set aside, but the policy function's read of that list fails its checksum and the
// policy says so (TagStoreDamaged, latestRef kept). Once the writers are back, the cron
// reconciler has the repository listed again, which writes the list anew, and the policy is
// Ready with the same latestRef, then follows a new tag, without anyone's help.
func TestDamagedEntryHealsIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: 2 * time.Second})
	reg := testenv.NewRegistry(t)
	// Lists over 1 KiB are kept in the value log (docs/store.md, Badger options).
	var tags []string
	for i := range 150 {
		tags = append(tags, fmt.Sprintf("v1.0.%03d", i))
	}
	reg.Push(t, "big/app", tags...)
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(hostileManifests, reg.Image("big/app")))); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "hostile-alphabetical", "v1.0.149")
	stop := latestGuard(t, s, "hostile-alphabetical", "v1.0.149", "v1.0.150")
	defer stop()

	for _, c := range []string{stack.Cron, stack.Scan, stack.Policy} {
		if err := s.Kill(c, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	// The largest value-log file is the one that holds the list.
	vlogs, err := filepath.Glob(filepath.Join(s.StoreDir(), "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	var largest string
	var size int64
	for _, p := range vlogs {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			largest, size = p, fi.Size()
		}
	}
	if size < 1<<10 {
		t.Fatalf("no value-log file holds a list: the largest of %v has %d bytes", vlogs, size)
	}
	damageFile(t, s.StoreDir(), filepath.Base(largest), func(b []byte) int { return len(b) / 2 })

	if err := s.Restart(ctx, stack.Policy); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Kube.Policies.RequestReconcile(ctx, "default", "hostile-alphabetical", time.Now().Format(time.RFC3339Nano)); err != nil {
		t.Fatal(err)
	}
	msg := waitReady(t, s, objectRef{v1.ImagePolicyKind, "hostile-alphabetical"}, "False", v1.TagStoreDamagedReason)
	if !strings.Contains(msg, "tag store is unreadable") {
		t.Errorf("policy message %q does not say the store is unreadable", msg)
	}
	back := time.Now()
	for _, c := range []string{stack.Scan, stack.Cron} {
		if err := s.Restart(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, s, objectRef{v1.ImagePolicyKind, "hostile-alphabetical"}, "True", v1.SucceededReason)
	t.Logf("policy Ready again %s after the writers were started", time.Since(back).Round(10*time.Millisecond))
	waitReady(t, s, objectRef{v1.ImageRepositoryKind, "hostile"}, "True", v1.SucceededReason)
	if _, err := os.Stat(filepath.Join(s.StoreDir(), "reflector.damaged")); err == nil {
		t.Error("a damaged entry set the store aside")
	}
	for _, c := range []string{stack.Scan, stack.Cron} {
		if v, _ := testenv.Scrape(t, s.Metrics[c]).Value("reflector_store_damage_total", map[string]string{"action": "rebuilt"}); v != 0 {
			t.Errorf("%s rebuilt the store %v times for a damaged entry", c, v)
		}
	}
	reg.Push(t, "big/app", "v1.0.150")
	scanned(t, s, "hostile")
	waitLatest(t, s, "hostile-alphabetical", "v1.0.150")
	for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
		if st := s.Status(c); st.Restarts != 0 {
			t.Errorf("%s restarted %d times (last exit %s)", c, st.Restarts, st.LastExit)
		}
	}
}
