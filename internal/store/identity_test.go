package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// An entry is read back only with the identity it was written for; each
// part of the identity counts, on the reader's side and across a reopen.
func TestIdentityRoundTrip(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	s := New(dir)
	scan := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	tags := []string{"1.0.0", "2.0.0"}
	if _, _, err := s.Put(ctx, "ns/app", testID, tags, scan); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := New(dir, ReadOnly())
	defer r.Close()
	e, err := r.Get(ctx, "ns/app", testID)
	if err != nil || e.Identity != testID || !slices.Equal(e.Tags, tags) {
		t.Fatalf("Get with the identity written = %+v, %v", e, err)
	}
	if rev, err := r.Revision(ctx, "ns/app", testID); err != nil || rev != RevisionOf(tags) {
		t.Fatalf("Revision with the identity written = %q, %v", rev, err)
	}
	others := map[string]Identity{
		"another object":  {UID: "another-uid", Image: testID.Image, Listing: testID.Listing},
		"another image":   {UID: testID.UID, Image: "ghcr.io/org/other", Listing: testID.Listing},
		"another listing": {UID: testID.UID, Image: testID.Image, Listing: "listing-2"},
		"no identity":     {},
	}
	for what, id := range others {
		if e, err := r.Get(ctx, "ns/app", id); !errors.Is(err, ErrOtherIdentity) || !errors.Is(err, ErrNotFound) {
			t.Errorf("Get for %s = %+v, %v; want ErrOtherIdentity, which is ErrNotFound", what, e, err)
		}
		if rev, err := r.Revision(ctx, "ns/app", id); !errors.Is(err, ErrOtherIdentity) {
			t.Errorf("Revision for %s = %q, %v; want ErrOtherIdentity", what, rev, err)
		}
	}
	// A key without any entry is not found, not another identity.
	if _, err := r.Get(ctx, "ns/none", testID); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrOtherIdentity) {
		t.Errorf("Get of a missing key = %v, want ErrNotFound only", err)
	}
}

// A full listing for another identity replaces the entry and counts as a
// change even when the tags are the same, so that its policies are
// evaluated for the new identity.
func TestPutForAnotherIdentity(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	tags := []string{"1.0.0"}
	if _, _, err := s.Put(ctx, "ns/app", testID, tags, time.Now()); err != nil {
		t.Fatal(err)
	}
	next := Identity{UID: "recreated-uid", Image: testID.Image, Listing: testID.Listing}
	e, changed, err := s.Put(ctx, "ns/app", next, tags, time.Now())
	if err != nil || !changed || e.Identity != next {
		t.Fatalf("Put for another identity = %+v, changed %v, %v; want changed", e, changed, err)
	}
	if _, err := s.Get(ctx, "ns/app", testID); !errors.Is(err, ErrOtherIdentity) {
		t.Errorf("Get for the replaced identity = %v, want ErrOtherIdentity", err)
	}
	if got, err := s.Get(ctx, "ns/app", next); err != nil || !slices.Equal(got.Tags, tags) {
		t.Errorf("Get for the new identity = %+v, %v", got, err)
	}
	if _, changed, err := s.Put(ctx, "ns/app", next, tags, time.Now()); err != nil || changed {
		t.Errorf("Put of the same list for the same identity: changed %v, %v", changed, err)
	}
}

// Push adds only to an entry of the same identity: a pushed tag must not
// extend a list that was listed for something else.
func TestPushRefusesAnotherIdentity(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	scan := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, _, err := s.Put(ctx, "ns/app", testID, []string{"1.0.0"}, scan); err != nil {
		t.Fatal(err)
	}
	other := Identity{UID: testID.UID, Image: "ghcr.io/org/other", Listing: testID.Listing}
	if p, err := s.Push(ctx, "ns/app", other, []string{"9.9.9"}, ""); !errors.Is(err, ErrOtherIdentity) || len(p.Tags) != 0 {
		t.Fatalf("Push for another identity = %+v, %v; want ErrOtherIdentity", p, err)
	}
	e, err := s.Get(ctx, "ns/app", testID)
	if err != nil || !slices.Equal(e.Tags, []string{"1.0.0"}) || !e.ScanTime.Equal(scan) {
		t.Fatalf("entry after the refused Push = %+v, %v", e, err)
	}
	a, err := push(ctx, s, "ns/app", testID, []string{"1.1.0"})
	if err != nil || len(a.Tags) != 1 || a.Entry.Identity != testID || !slices.Equal(a.Entry.Tags, []string{"1.0.0", "1.1.0"}) {
		t.Fatalf("push for the same identity = %+v, %v", a, err)
	}
}

// An entry written before identities were recorded stays readable as data
// but matches no identity; the next full listing replaces it.
func TestEntryWithoutIdentity(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	value, rev := encodeTags([]string{"1.0.0"})
	db, err := badger.Open(New(dir).badgerOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		old := `{"revision":"` + rev + `","scanTime":"2025-01-01T00:00:00Z"}`
		if err := txn.Set(metaKey("ns/app"), []byte(old)); err != nil {
			return err
		}
		return txn.Set(tagsKey("ns/app"), value)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := New(dir)
	defer s.Close()
	if _, err := s.Get(ctx, "ns/app", testID); !errors.Is(err, ErrOtherIdentity) {
		t.Errorf("Get of an entry without identity = %v, want ErrOtherIdentity", err)
	}
	if _, err := s.Revision(ctx, "ns/app", testID); !errors.Is(err, ErrOtherIdentity) {
		t.Errorf("Revision of an entry without identity = %v, want ErrOtherIdentity", err)
	}
	if _, err := s.Push(ctx, "ns/app", testID, []string{"2.0.0"}, ""); !errors.Is(err, ErrOtherIdentity) {
		t.Errorf("Push to an entry without identity = %v, want ErrOtherIdentity", err)
	}
	if keys, err := s.Keys(ctx); err != nil || !slices.Equal(keys, []string{"ns/app"}) {
		t.Errorf("Keys = %v, %v; the entry is still there for the cron reconciler to clean", keys, err)
	}
	e, changed, err := s.Put(ctx, "ns/app", testID, []string{"1.0.0"}, time.Now())
	if err != nil || !changed || e.Revision != rev {
		t.Fatalf("Put over an entry without identity = %+v, changed %v, %v; want changed", e, changed, err)
	}
	if got, err := s.Get(ctx, "ns/app", testID); err != nil || !slices.Equal(got.Tags, []string{"1.0.0"}) {
		t.Errorf("Get after the full listing = %+v, %v", got, err)
	}
}

// Writes must say what they are for.
func TestIncompleteIdentity(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	for _, id := range []Identity{{}, {UID: "uid"}, {Image: "ghcr.io/org/app"}} {
		if _, _, err := s.Put(ctx, "ns/app", id, []string{"1.0.0"}, time.Now()); !errors.Is(err, ErrIncompleteIdentity) {
			t.Errorf("Put with %+v = %v, want ErrIncompleteIdentity", id, err)
		}
		if _, err := s.Push(ctx, "ns/app", id, []string{"1.0.0"}, ""); !errors.Is(err, ErrIncompleteIdentity) {
			t.Errorf("Push with %+v = %v, want ErrIncompleteIdentity", id, err)
		}
	}
	if keys, err := s.Keys(ctx); err != nil || len(keys) != 0 {
		t.Errorf("Keys = %v, %v; want none written", keys, err)
	}
}

// DeleteFor deletes an entry only for the object it was listed for: the
// deletion of an object never takes the tags of a successor of the same name
// that was already scanned. Unreadable metadata goes too, since nobody can
// use it.
func TestDeleteFor(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t)
	tags := []string{"1.0.0"}
	successor := Identity{UID: "successor-uid", Image: testID.Image, Listing: testID.Listing}
	if _, _, err := s.Put(ctx, "ns/app", successor, tags, time.Now()); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteFor(ctx, "ns/app", testID.UID); err != nil || deleted {
		t.Fatalf("DeleteFor another object's entry = %v, %v; want kept", deleted, err)
	}
	if _, err := s.Get(ctx, "ns/app", successor); err != nil {
		t.Fatalf("the successor's entry after DeleteFor of its predecessor: %v", err)
	}
	if deleted, err := s.DeleteFor(ctx, "ns/app", successor.UID); err != nil || !deleted {
		t.Fatalf("DeleteFor the entry's own object = %v, %v; want deleted", deleted, err)
	}
	if _, err := s.Get(ctx, "ns/app", successor); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after DeleteFor = %v, want ErrNotFound", err)
	}
	if deleted, err := s.DeleteFor(ctx, "ns/app", successor.UID); err != nil || deleted {
		t.Errorf("DeleteFor a missing entry = %v, %v; want nothing done", deleted, err)
	}
	if _, err := s.DeleteFor(ctx, "ns/app", ""); !errors.Is(err, ErrIncompleteIdentity) {
		t.Errorf("DeleteFor without a UID = %v, want ErrIncompleteIdentity", err)
	}

	// Metadata written before identities were recorded belongs to nobody and stays; damaged
	// metadata goes.
	db, err := s.acquire(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(metaKey("ns/old"), []byte(`{"revision":"r"}`)); err != nil {
			return err
		}
		return txn.Set(metaKey("ns/damaged"), []byte(`{"revision":`))
	})
	s.release()
	if err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteFor(ctx, "ns/old", testID.UID); err != nil || deleted {
		t.Errorf("DeleteFor an entry without identity = %v, %v; want kept", deleted, err)
	}
	if deleted, err := s.DeleteFor(ctx, "ns/damaged", testID.UID); err != nil || !deleted {
		t.Errorf("DeleteFor damaged metadata = %v, %v; want deleted", deleted, err)
	}
}
