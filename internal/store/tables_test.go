package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	badgeropts "github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// copyDir copies the files of a store directory into a new one.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tags")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// tableOf returns the name and content of the one table of dir.
func tableOf(t testing.TB, dir string) (string, []byte) {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("tables of %s: %v, %v; want one", dir, matches, err)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	return matches[0], b
}

// Whatever 8 bytes of a table are damaged, the footer, the index, a block's entries or its
// trailer, no process dies: a reader reports the damage and a writer rebuilds. Badger alone
// slices out of range or dereferences a nil block in one of its goroutines when a length in a
// footer or block trailer is damaged.
func TestDamagedTableNeverKillsTheProcess(t *testing.T) {
	ctx := testCtx(t)
	seed := seedDamageStore(t, 20)
	_, b := tableOf(t, seed)
	step := 61
	if testing.Short() {
		step = 307
	}
	for off := 0; off < len(b); off += step {
		dir := copyDir(t, seed)
		name, _ := tableOf(t, dir)
		damaged := append([]byte(nil), b...)
		for i := off; i < off+8 && i < len(damaged); i++ {
			damaged[i] ^= 0x5a
		}
		if err := os.WriteFile(name, damaged, 0o644); err != nil {
			t.Fatal(err)
		}
		r := New(dir, ReadOnly(), WithLinger(0))
		_, err := r.Get(ctx, "ns/r3", testID)
		if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
			t.Errorf("damage at %d of %d: reader's Get = %v, want ErrCorrupt", off, len(b), err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		w := New(dir, WithLinger(0))
		if _, err := w.Get(ctx, "ns/r3", testID); !errors.Is(err, ErrRebuilt) {
			t.Errorf("damage at %d of %d: writer's Get = %v, want ErrRebuilt", off, len(b), err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// An intact table passes checkTable, and the check names what it found damaged.
func TestCheckTable(t *testing.T) {
	_, b := tableOf(t, seedDamageStore(t, 20))
	if err := checkTable(b); err != nil {
		t.Fatalf("checkTable of an intact table = %v", err)
	}
	for _, tc := range []struct {
		name string
		off  func(n int) int
		says string
	}{
		{"checksum length", func(n int) int { return n - 4 }, "table checksum of"},
		{"index", func(n int) int { return n - 200 }, "index"},
		{"first block", func(int) int { return 16 }, "block 0"},
	} {
		damaged := append([]byte(nil), b...)
		for i := tc.off(len(b)); i < tc.off(len(b))+4; i++ {
			damaged[i] ^= 0x5a
		}
		if err := checkTable(damaged); !errors.Is(err, errTable) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s damaged: checkTable = %v, want it to say %q", tc.name, err, tc.says)
		}
	}
	if err := checkTable(nil); !errors.Is(err, errTable) {
		t.Errorf("checkTable of nothing = %v", err)
	}
}

// FuzzCheckTable: checkTable never panics, and a table it passes Badger opens, checking it
// (OnTableRead), without panicking either.
func FuzzCheckTable(f *testing.F) {
	_, b := tableOf(f, seedDamageStore(f, 3))
	f.Add(b)
	f.Add([]byte{0, 0, 0, 0})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkTable(b) != nil {
			return
		}
		name := filepath.Join(dir, "000001.sst")
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
		mf, err := z.OpenMmapFile(name, os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := table.OpenTable(mf, table.Options{ChkMode: badgeropts.OnTableRead, Compression: badgeropts.None})
		if err != nil {
			_ = mf.Close(-1)
			return
		}
		_ = tbl.DecrRef()
	})
}
