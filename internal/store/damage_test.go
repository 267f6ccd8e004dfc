package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// seedDamageStore writes n entries of 500 tags each with a writer that
// closes, and returns the directory. Each entry is a listing of 498 tags and
// two pushes, so that the damage meets deltas too.
func seedDamageStore(t testing.TB, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tags")
	s := New(dir)
	ctx := testCtx(t)
	for i := range n {
		key, tags := fmt.Sprintf("ns/r%d", i), manyTags(500, fmt.Sprintf("v%d.", i))
		if _, _, err := s.Put(ctx, key, testID, tags[:498], time.Now()); err != nil {
			t.Fatal(err)
		}
		for _, tag := range tags[498:] {
			if _, err := s.Push(ctx, key, testID, []string{tag}, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// damage flips 64 bytes of the first file in dir whose name ends in suffix,
// at the offset that where returns for its size.
func damage(t *testing.T, dir, suffix string, where func(size int) int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		off := where(len(b))
		for i := off; i < off+64 && i < len(b); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no file *%s in %s", suffix, dir)
}

// The damages a directory can suffer in the files Badger needs to open it:
// each makes a writer's open fail, and the writer rebuilds.
var directoryDamages = []struct {
	name, suffix string
	where        func(int) int
}{
	{"manifest", badger.ManifestFilename, func(int) int { return 8 }},
	{"value-log header", ".vlog", func(int) int { return 0 }},
	{"table index", ".sst", func(n int) int { return n - 200 }},
	{"table block", ".sst", func(n int) int { return n / 3 }},
}

// A writer that finds the directory damaged sets it aside, starts an empty
// store and goes on: the call that found the damage succeeds, a read of a
// lost entry says the store was rebuilt, the aside copy says why, and a
// second damage replaces the first copy instead of adding one.
func TestDamagedDirectoryIsRebuilt(t *testing.T) {
	for _, d := range directoryDamages {
		t.Run(d.name, func(t *testing.T) {
			ctx := testCtx(t)
			dir := seedDamageStore(t, 20)
			damage(t, dir, d.suffix, d.where)

			w := New(dir)
			defer w.Close()
			if _, _, err := w.Put(ctx, "ns/new", testID, []string{"v1"}, time.Now()); err != nil {
				t.Fatalf("Put on a damaged directory = %v, want it to rebuild and succeed", err)
			}
			_, err := w.Get(ctx, "ns/r3", testID)
			if !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrRebuilt) {
				t.Fatalf("Get of a lost entry = %v, want ErrNotFound and ErrRebuilt", err)
			}
			if e, err := w.Get(ctx, "ns/new", testID); err != nil || len(e.Tags) != 1 {
				t.Fatalf("Get of the entry written after the rebuild = %v, %v", e, err)
			}
			reason, err := os.ReadFile(filepath.Join(dir, asideDir, asideReason))
			if err != nil || !strings.Contains(string(reason), ErrCorrupt.Error()) {
				t.Fatalf("aside REASON = %q, %v; want the damage", reason, err)
			}
			if !exists(filepath.Join(dir, asideDir, badger.ManifestFilename)) {
				t.Fatal("the aside copy lacks the damaged MANIFEST")
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			// Damaged again: still one aside copy, the newer one.
			damage(t, dir, badger.ManifestFilename, func(int) int { return 8 })
			w2 := New(dir)
			defer w2.Close()
			if _, err := w2.Keys(ctx); err != nil {
				t.Fatalf("Keys on a damaged directory = %v, want it to rebuild", err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.IsDir() && e.Name() != asideDir {
					t.Errorf("directory %s left beside the store", e.Name())
				}
			}
			second, err := os.ReadFile(filepath.Join(dir, asideDir, asideReason))
			if err != nil || string(second) == string(reason) || !strings.Contains(string(second), "anifest") {
				t.Errorf("aside REASON after the second damage = %q, %v; want the second damage's", second, err)
			}
		})
	}
}

// A reader leaves a damaged directory to the writers: it reports it, also a
// damaged table block, which Badger would pass over as a key it does not
// have, and moves nothing. The next writer rebuilds it, and the reader then
// reads the fresh store.
func TestReaderLeavesDamageToTheWriter(t *testing.T) {
	for _, d := range directoryDamages {
		t.Run(d.name, func(t *testing.T) {
			ctx := testCtx(t)
			dir := seedDamageStore(t, 20)
			damage(t, dir, d.suffix, d.where)

			r := New(dir, ReadOnly(), WithLinger(0))
			defer r.Close()
			_, err := r.Get(ctx, "ns/r3", testID)
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
				t.Fatalf("reader's Get on a damaged directory = %v, want ErrCorrupt", err)
			}
			if errors.Is(err, ErrRebuilt) || exists(filepath.Join(dir, asideDir)) {
				t.Fatalf("the reader set the directory aside (%v)", err)
			}

			w := New(dir)
			if _, err := w.Keys(ctx); err != nil {
				t.Fatalf("writer's Keys = %v", err)
			}
			if _, _, err := w.Put(ctx, "ns/r3", testID, []string{"v2"}, time.Now()); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if e, err := r.Get(ctx, "ns/r3", testID); err != nil || len(e.Tags) != 1 || e.Tags[0] != "v2" {
				t.Fatalf("reader's Get after the rebuild = %v, %v; want [v2]", e.Tags, err)
			}
			_, err = r.Get(ctx, "ns/r4", testID)
			if !errors.Is(err, ErrRebuilt) {
				t.Fatalf("reader's Get of a lost entry = %v, want ErrRebuilt", err)
			}
		})
	}
}

// A damaged value in the value log fails the reads of the entries it holds
// (ErrCorrupt, never wrong tags) without failing the directory; a Put of the
// same list writes it again and reports a change, since its readers were
// waiting for it, and a Missing or Push on it reports ErrCorrupt so
// that the caller lists in full.
func TestDamagedValueIsReplaced(t *testing.T) {
	ctx := testCtx(t)
	dir := seedDamageStore(t, 20)
	damage(t, dir, ".vlog", func(n int) int { return n / 2 })

	w := New(dir)
	defer w.Close()
	var bad []string
	for i := range 20 {
		key := fmt.Sprintf("ns/r%d", i)
		e, err := w.Get(ctx, key, testID)
		switch {
		case errors.Is(err, ErrCorrupt):
			bad = append(bad, key)
		case err != nil:
			t.Fatalf("Get %s = %v", key, err)
		case len(e.Tags) != 500:
			t.Fatalf("Get %s returned %d tags", key, len(e.Tags))
		}
	}
	if len(bad) == 0 {
		t.Fatal("no entry reported damaged")
	}
	// The scan's push path, which reads the base's bytes without decoding them: Badger's
	// checksum of the value fails.
	if _, _, err := w.Missing(ctx, bad[0], testID, []string{"zzz"}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Missing on a damaged entry = %v, want ErrCorrupt", err)
	}
	if _, err := w.Push(ctx, bad[0], testID, []string{"zzz"}, ""); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Push on a damaged entry = %v, want ErrCorrupt", err)
	}
	for _, key := range bad {
		var i int
		fmt.Sscanf(key, "ns/r%d", &i)
		tags := manyTags(500, fmt.Sprintf("v%d.", i))
		_, changed, err := w.Put(ctx, key, testID, tags, time.Now())
		if err != nil || !changed {
			t.Fatalf("Put of %s's list again = changed %v, %v; want a change", key, changed, err)
		}
		if e, err := w.Get(ctx, key, testID); err != nil || len(e.Tags) != 500 {
			t.Fatalf("Get %s after the Put = %d tags, %v", key, len(e.Tags), err)
		}
		if _, changed, err := w.Put(ctx, key, testID, tags, time.Now()); err != nil || changed {
			t.Fatalf("Put of the intact list again = changed %v, %v; want no change", changed, err)
		}
	}
	if exists(filepath.Join(dir, asideDir)) {
		t.Fatal("a damaged value set the directory aside")
	}
}

// Failures of the volume rather than of what it holds are never damage.
func TestClassify(t *testing.T) {
	s := New(t.TempDir())
	for _, tc := range []struct {
		err  error
		want error
	}{
		{errors.New("While opening memtable: open 00001.mem: no space left on device"), ErrFull},
		{errors.New("open MANIFEST: permission denied"), ErrUnavailable},
		{errors.New("read 000002.sst: input/output error"), ErrUnavailable},
		{errors.New("open: read-only file system"), ErrUnavailable},
		{errors.New("manifest has checksum mismatch"), ErrCorrupt},
		{errors.New("failed to verify checksum for table: 000002.sst"), ErrCorrupt},
	} {
		if got := s.classify(tc.err); !errors.Is(got, tc.want) {
			t.Errorf("classify(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if got := s.classify(errors.New(strings.Repeat("x", 10000))); len(got.Error()) > maxCause+len(s.dir)+100 {
		t.Errorf("classify kept %d bytes of a long cause", len(got.Error()))
	}
}
