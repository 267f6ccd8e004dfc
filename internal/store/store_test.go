package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// testCtx bounds every store call of a test.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newTestStore returns a Store on a fresh directory, closed with the test.
func newTestStore(t testing.TB, opts ...Option) *Store {
	s := New(t.TempDir(), opts...)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// testID is the identity that tests which are not about identities write
// and read with.
var testID = Identity{UID: "7c8d0e2a-uid", Image: "ghcr.io/org/app", Listing: "listing-1"}

// manyTags returns n distinct tags shaped like real ones.
func manyTags(n int, prefix string) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("%s%d.%d.%d-rc.%d", prefix, i/10000, i/100%100, i%100, i%7)
	}
	return tags
}

func TestPutGetRoundTrip(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	scan := time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)

	e, changed, err := s.Put(ctx, "apps/podinfo", testID, []string{"v2", "v1", "v2", "latest"}, scan)
	if err != nil || !changed {
		t.Fatalf("Put = %v, changed %v", err, changed)
	}
	want := Entry{Tags: []string{"latest", "v1", "v2"}, Revision: RevisionOf([]string{"v1", "v2", "latest"}), ScanTime: scan, Identity: testID}
	if !entriesEqual(e, want) {
		t.Fatalf("Put returned %+v, want %+v", e, want)
	}
	got, err := s.Get(ctx, "apps/podinfo", testID)
	if err != nil || !entriesEqual(got, want) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, want)
	}
	rev, err := s.Revision(ctx, "apps/podinfo", testID)
	if err != nil || rev != want.Revision {
		t.Fatalf("Revision = %q, %v; want %q", rev, err, want.Revision)
	}

	_, changed, err = s.Put(ctx, "apps/podinfo", testID, []string{"latest", "v1", "v2"}, scan.Add(time.Minute))
	if err != nil || changed {
		t.Fatalf("Put of the same list: changed %v, %v", changed, err)
	}
	got, _ = s.Get(ctx, "apps/podinfo", testID)
	if !got.ScanTime.Equal(scan.Add(time.Minute)) {
		t.Errorf("ScanTime = %v, want the new scan time", got.ScanTime)
	}
}

func TestEmptyList(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	if _, _, err := s.Put(ctx, "ns/empty", testID, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(ctx, "ns/empty", testID)
	if err != nil || e.Tags == nil || len(e.Tags) != 0 || e.Revision != RevisionOf([]string{}) {
		t.Fatalf("Get = %+v, %v; want an empty, non-nil list", e, err)
	}
}

func TestRoundTrip100kTags(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	tags := manyTags(100_000, "v")
	shuffled := slices.Clone(tags)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	shuffled = append(shuffled, shuffled[:1000]...)
	want := slices.Sorted(slices.Values(tags))

	s := New(dir)
	e, _, err := s.Put(ctx, "ns/big", testID, shuffled, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Tags, want) {
		t.Fatal("Put did not return the sorted, de-duplicated list")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A new Store, as a reader: the list comes back from disk.
	r := New(dir, ReadOnly())
	defer r.Close()
	got, err := r.Get(ctx, "ns/big", testID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tags, want) || got.Revision != RevisionOf(tags) {
		t.Fatalf("read back %d tags, revision %s; want %d, %s", len(got.Tags), got.Revision, len(want), RevisionOf(tags))
	}
}

func TestDeleteDeletes(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	s := New(dir)
	for _, k := range []string{"a/one", "a/two", "b/one"} {
		if _, _, err := s.Put(ctx, k, testID, manyTags(2000, k), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := s.Delete(ctx, "a/two"); err != nil || !removed {
		t.Fatal(err)
	}
	if removed, err := s.Delete(ctx, "a/missing"); err != nil || removed {
		t.Fatalf("deleting a missing key: %v", err)
	}
	checkGone := func(s *Store) {
		t.Helper()
		if _, err := s.Get(ctx, "a/two", testID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after Delete: %v, want ErrNotFound", err)
		}
		if _, err := s.Revision(ctx, "a/two", testID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Revision after Delete: %v, want ErrNotFound", err)
		}
		keys, err := s.Keys(ctx)
		if err != nil || !slices.Equal(keys, []string{"a/one", "b/one"}) {
			t.Errorf("Keys = %v, %v; want [a/one b/one]", keys, err)
		}
	}
	checkGone(s)
	if _, err := s.Push(ctx, "a/two", testID, []string{"x"}, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Push after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := New(dir, ReadOnly())
	checkGone(r)
	r.Close()

	// No version of the deleted keys is visible to Badger itself.
	db, err := badger.Open(badger.DefaultOptions(dir).WithReadOnly(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := string(it.Item().Key()); strings.HasSuffix(k, "a/two") {
				t.Errorf("badger still has %q", k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPushKeepsTheScanTime: pushed tags join the entry's list, once each, under the revision
// that follows the listing's, and the entry keeps the listing's scan time.
func TestPushKeepsTheScanTime(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	scan := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	put, _, err := s.Put(ctx, "ns/app", testID, []string{"v1", "v3"}, scan)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Push(ctx, "ns/app", testID, []string{"v2", "v3", "v2"}, "")
	if err != nil || !slices.Equal(p.Tags, []string{"v2"}) {
		t.Fatalf("Push = %+v, %v; want v2 added", p, err)
	}
	want := []string{"v1", "v2", "v3"}
	rev := RevisionAfter(put.Revision, []string{"v2"})
	if p.From != put.Revision || p.Revision != rev || p.Count != 3 || !slices.Equal(p.Latest, want) || !p.ScanTime.Equal(scan) {
		t.Fatalf("Push returned %+v", p)
	}
	p, err = s.Push(ctx, "ns/app", testID, []string{"v1"}, "")
	if err != nil || len(p.Tags) != 0 || p.Revision != rev {
		t.Fatalf("Push of a known tag: %+v, %v", p, err)
	}
	got, err := s.Get(ctx, "ns/app", testID)
	if err != nil || !slices.Equal(got.Tags, want) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := s.Push(ctx, "ns/new", testID, []string{"v1"}, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Push on a missing key: %v, want ErrNotFound", err)
	}
}

func TestInvalidKeys(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	for _, k := range []string{"", "name", "/name", "ns/", "ns/a/b"} {
		if _, err := s.Get(ctx, k, testID); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, _, err := s.Put(ctx, k, testID, nil, time.Now()); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestReadOnlyRejectsWrites(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, ReadOnly())
	if _, _, err := s.Put(ctx, "ns/a", testID, nil, time.Now()); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Put = %v, want ErrReadOnly", err)
	}
	if _, err := s.Push(ctx, "ns/a", testID, nil, ""); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Push = %v, want ErrReadOnly", err)
	}
	if _, err := s.Delete(ctx, "ns/a"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Delete = %v, want ErrReadOnly", err)
	}
	// A reader on a directory nobody has written yet sees an empty store.
	if _, err := s.Get(ctx, "ns/a", testID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get on a new directory = %v, want ErrNotFound", err)
	}
	if keys, err := s.Keys(ctx); err != nil || len(keys) != 0 {
		t.Errorf("Keys on a new directory = %v, %v", keys, err)
	}
}

func TestClosedStore(t *testing.T) {
	ctx := testCtx(t)
	s := New(t.TempDir())
	if _, _, err := s.Put(ctx, "ns/a", testID, []string{"x"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Get(ctx, "ns/a", testID); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
}

// entriesEqual compares entries, times by instant.
func entriesEqual(a, b Entry) bool {
	return slices.Equal(a.Tags, b.Tags) && a.Revision == b.Revision && a.ScanTime.Equal(b.ScanTime) && a.Identity == b.Identity
}

// TestPushReportsTheAddition: Push tells the revision it added to and only the tags that were
// new.
func TestPushReportsTheAddition(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	put, _, err := s.Put(ctx, "ns/app", testID, []string{"v1", "v2"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, err := push(ctx, s, "ns/app", testID, []string{"v2", "v3", "v0"})
	if err != nil {
		t.Fatal(err)
	}
	if a.From != put.Revision || !slices.Equal(a.Tags, []string{"v3", "v0"}) ||
		!slices.Equal(a.Entry.Tags, []string{"v0", "v1", "v2", "v3"}) || a.Entry.Revision == put.Revision {
		t.Fatalf("push = %+v; want v3 and v0 added to revision %s", a, put.Revision)
	}
	again, err := push(ctx, s, "ns/app", testID, []string{"v3"})
	if err != nil || len(again.Tags) != 0 || again.From != a.Entry.Revision || again.Entry.Revision != a.Entry.Revision {
		t.Fatalf("push of a stored tag = %+v, %v; want nothing added", again, err)
	}
}

// TestProofKeyIsShared: every Store of a directory reads the same key, created once, and a
// fresh read sees a replaced file.
func TestProofKeyIsShared(t *testing.T) {
	dir := t.TempDir()
	a, b := New(dir), New(dir, ReadOnly())
	defer a.Close()
	defer b.Close()
	ka, err := a.ProofKey(false)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.ProofKey(false)
	if err != nil || !bytes.Equal(ka, kb) || len(ka) != 32 {
		t.Fatalf("keys %x and %x (%v); want one key of 32 bytes", ka, kb, err)
	}
	if err := os.Remove(filepath.Join(dir, proofFile)); err != nil {
		t.Fatal(err)
	}
	kc, err := a.ProofKey(true)
	if err != nil || bytes.Equal(kc, ka) {
		t.Fatalf("fresh key %x (%v); want a new key after the file went", kc, err)
	}
	if cached, _ := b.ProofKey(false); !bytes.Equal(cached, ka) {
		t.Fatal("a key read before changed without a fresh read")
	}
	if fresh, _ := b.ProofKey(true); !bytes.Equal(fresh, kc) {
		t.Fatal("a fresh read does not see the new key")
	}
}
