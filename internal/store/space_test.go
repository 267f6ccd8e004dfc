package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"

	"github.com/imagereflector/reflector/internal/testenv"
)

// EnvFaults enables the tests that mount a small tmpfs, which needs root.
const EnvFaults = "REFLECTOR_FAULTS_TEST"

// mountTmpfs mounts a tmpfs of size (as mount's size= option) for the test
// and returns its mount point; it skips the test when that is not allowed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Getenv(EnvFaults) == "" {
		t.Skipf("set %s=1 to run the full-volume tests on a small tmpfs (they mount one, which needs root): make faults-test", EnvFaults)
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s (%v): the full-volume tests need root", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fill fills the volume of dir with a file, leaving leave bytes, and returns its path.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	testenv.FillVolume(t, p, leave)
	return p
}

// occupy allocates a file of size bytes.
func occupy(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Fatal(err)
	}
}

// On a full volume a writer neither opens nor writes, with ErrFull saying
// how much room there is and is needed; readers go on reading; nothing
// faults; once room returns, writes succeed again.
func TestFullVolume(t *testing.T) {
	ctx := testCtx(t)
	dir := mountTmpfs(t, "48m")
	w := New(dir, WithLinger(0))
	defer w.Close()
	r := New(dir, ReadOnly(), WithLinger(0))
	defer r.Close()
	for i := range 10 {
		if _, _, err := w.Put(ctx, fmt.Sprintf("ns/r%d", i), testID, manyTags(1000, "v"), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// ns/r0 holds deltas too: pushes since its listing, through Push.
	for i := range 3 {
		if _, err := w.Push(ctx, "ns/r0", testID, []string{fmt.Sprintf("pushed-%d", i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := w.Push(ctx, "ns/r0", testID, []string{"pushed-3"}, ""); err != nil || p.Count != 1004 {
		t.Fatalf("Push = %+v, %v", p, err)
	}

	filler := fill(t, dir, 2<<20)
	if _, err := w.Push(ctx, "ns/r0", testID, []string{"pushed-full"}, ""); !errors.Is(err, ErrFull) {
		t.Fatalf("Push on a full volume = %v, want ErrFull", err)
	}
	if _, err := w.Push(ctx, "ns/r0", testID, []string{"pushed-full"}, ""); !errors.Is(err, ErrFull) {
		t.Fatalf("Push on a full volume = %v, want ErrFull", err)
	}
	_, _, err := w.Put(ctx, "ns/r0", testID, manyTags(1001, "v"), time.Now())
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "tag store is full") || !strings.Contains(err.Error(), "MiB free") {
		t.Fatalf("Put on a full volume = %v, want ErrFull saying how much is free", err)
	}
	if _, err := w.Keys(ctx); !errors.Is(err, ErrFull) {
		t.Fatalf("a writer's open on a full volume = %v, want ErrFull", err)
	}
	if e, err := r.Get(ctx, "ns/r0", testID); err != nil || len(e.Tags) != 1004 {
		t.Fatalf("a reader on a full volume: %d tags, %v; want the stored 1004", len(e.Tags), err)
	}

	// Room for a session, not for a list of several MiB.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	free, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	occupy(t, filler, free-w.reserve()-entryOverhead-(1<<20))
	big := manyTags(200000, "a-rather-long-tag-name-")
	if _, _, err := w.Put(ctx, "ns/big", testID, big, time.Now()); !errors.Is(err, ErrFull) {
		t.Fatalf("Put of a list larger than the room left = %v, want ErrFull", err)
	}
	if _, _, err := w.Put(ctx, "ns/small", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatalf("Put of a small list with room for it = %v", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Put(ctx, "ns/big", testID, big, time.Now()); err != nil {
		t.Fatalf("Put once room returned = %v", err)
	}
	if e, err := r.Get(ctx, "ns/big", testID); err != nil || len(e.Tags) != len(big) {
		t.Fatalf("Get once room returned: %d tags, %v", len(e.Tags), err)
	}
	if _, err := w.Push(ctx, "ns/r0", testID, []string{"pushed-full"}, ""); err != nil {
		t.Fatalf("Push once room returned = %v", err)
	}
	if e, err := r.Get(ctx, "ns/r0", testID); err != nil || len(e.Tags) != 1005 || !slices.Contains(e.Tags, "pushed-full") {
		t.Fatalf("Get of the deltas once room returned: %d tags, %v", len(e.Tags), err)
	}
}

// The aside copy of a damaged store is the first thing given up when the
// volume runs short.
func TestFullVolumeDropsTheAsideCopy(t *testing.T) {
	ctx := testCtx(t)
	dir := mountTmpfs(t, "48m")
	w := New(dir, WithLinger(0))
	defer w.Close()
	if _, _, err := w.Put(ctx, "ns/a", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(dir, asideDir)
	if err := os.Mkdir(aside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(aside, "000001.vlog"), make([]byte, 16<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	fill(t, dir, 1<<20)
	if _, _, err := w.Put(ctx, "ns/a", testID, []string{"v2"}, time.Now()); err != nil {
		t.Fatalf("Put on a volume that the aside copy fills = %v, want the copy dropped and the write done", err)
	}
	if exists(aside) {
		t.Fatal("the aside copy is still there")
	}
}

// envFillChild makes the test binary a child that writes 512 KiB values into the directory
// it names until a write fails: through Badger itself ("raw") or through a Store ("store").
const envFillChild = "STORE_TEST_FILL"

// The premise and the cure, side by side on the same nearly full tmpfs: Badger opened with the
// store's options and written to until the volume is full dies of SIGBUS (its mapped value log),
// while the same writes through a Store store what fits, then end with ErrFull and a clean exit.
func TestFullVolumeFaultsBadgerButNotTheStore(t *testing.T) {
	if spec := os.Getenv(envFillChild); spec != "" {
		os.Exit(fillChild(spec))
	}
	for _, mode := range []string{"raw", "store"} {
		t.Run(mode, func(t *testing.T) {
			dir := mountTmpfs(t, "32m")
			fill(t, dir, 20<<20)
			cmd := exec.Command(os.Args[0], "-test.run=^TestFullVolumeFaultsBadgerButNotTheStore$")
			cmd.Env = append(os.Environ(), envFillChild+"="+mode+":"+dir)
			out, err := cmd.CombinedOutput()
			switch mode {
			case "raw":
				if err == nil || !strings.Contains(string(out), "SIGBUS") {
					t.Fatalf("Badger on a full volume: %v, output %q; want a SIGBUS", err, out[:min(len(out), 500)])
				}
			case "store":
				if err != nil || !strings.Contains(string(out), ErrFull.Error()) || strings.Contains(string(out), "after 0 lists") {
					t.Fatalf("the store filling a volume: %v, output %q; want some lists stored, then ErrFull and a clean exit", err, out[:min(len(out), 500)])
				}
			}
		})
	}
}

func fillChild(spec string) int {
	mode, dir, _ := strings.Cut(spec, ":")
	s := New(dir)
	value := make([]byte, 512<<10)
	if mode == "raw" {
		db, err := badger.Open(s.badgerOptions(false))
		if err != nil {
			fmt.Println("open:", err)
			return 3
		}
		for i := 0; ; i++ {
			if err := db.Update(func(txn *badger.Txn) error { return txn.Set(fmt.Appendf(nil, "k%d", i), value) }); err != nil {
				fmt.Println("write:", err)
				_ = db.Close()
				return 4
			}
		}
	}
	defer s.Close()
	tags := manyTags(len(value)/16, "v")
	for i := 0; ; i++ {
		if _, _, err := s.Put(context.Background(), fmt.Sprintf("ns/r%d", i), testID, tags, time.Now()); err != nil {
			fmt.Printf("put after %d lists: %v\n", i, err)
			if errors.Is(err, ErrFull) {
				return 0
			}
			return 5
		}
	}
}
