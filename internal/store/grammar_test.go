package store

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// invalid are tags outside the distribution spec's grammar that sort after
// the valid ones: kilobytes long, a terminal escape, a right-to-left
// override, DEL, invalid UTF-8, semver build metadata, a leading period.
var invalid = []string{
	"z" + strings.Repeat("9", 200), "zz\x1b[31mred", "zz\u202e0.1v", "zz\x7f", "zz\xff\xfe", "1.0.0+build.1", ".hidden", "",
}

// writeRaw stores tags under key as the store did before it left tags outside
// the grammar out: byte for byte, with the revision of exactly that value.
func writeRaw(t *testing.T, dir, key string, tags []string) string {
	t.Helper()
	s := New(dir)
	db, err := badger.Open(s.badgerOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	value, _ := json.Marshal(tags)
	rev := revisionOfValue(value)
	err = db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(metaKey(key), encodeMeta(meta{Revision: rev, ScanTime: time.Now().UTC(), Identity: testID})); err != nil {
			return err
		}
		return txn.Set(tagsKey(key), value)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return rev
}

// Tags outside the grammar are never written, and those an entry written
// before holds are never returned: Get leaves them out (the revision stays
// the stored list's), a Put of the list a scan now lists replaces the entry
// and reports a change, and Push neither keeps nor adds them.
func TestTagsOutsideTheGrammar(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	valid := []string{"1.0.0", "1.1.0", "_underscore", "latest", "v1.2.3-rc.1"}
	rev := writeRaw(t, dir, "ns/old", append(slices.Clone(valid), invalid...))

	for _, mode := range []struct {
		name string
		opts []Option
	}{{"reader", []Option{ReadOnly()}}, {"writer", nil}} {
		s := New(dir, mode.opts...)
		e, err := s.Get(ctx, "ns/old", testID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(e.Tags, valid) || e.Revision != rev {
			t.Errorf("%s: Get of an old entry = %q, %s; want %q, %s", mode.name, e.Tags, e.Revision, valid, rev)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	s := New(dir)
	e, changed, err := s.Put(ctx, "ns/old", testID, valid, time.Now())
	if err != nil || !changed || e.Revision == rev || e.Revision != RevisionOf(valid) {
		t.Fatalf("Put of the valid list over an old entry = %s, changed %v, %v; want the valid list's revision and a change", e.Revision, changed, err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, dir, "ns/old", append(slices.Clone(valid), invalid...))
	s = New(dir)
	defer s.Close()
	a, err := push(ctx, s, "ns/old", testID, append([]string{"2.0.0"}, invalid...))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"1.0.0", "1.1.0", "2.0.0"}, valid[2:]...)
	if !slices.Equal(a.Entry.Tags, want) || !slices.Equal(a.Tags, []string{"2.0.0"}) || a.Entry.Revision != RevisionAfter(rev, a.Tags) {
		t.Errorf("push to an old entry = %q adding %q, %s; want %q adding [2.0.0], %s", a.Entry.Tags, a.Tags, a.Entry.Revision, want, RevisionAfter(rev, a.Tags))
	}

	e, _, err = s.Put(ctx, "ns/new", testID, append(slices.Clone(invalid), "v1"), time.Now())
	if err != nil || !slices.Equal(e.Tags, []string{"v1"}) || e.Revision != RevisionOf([]string{"v1"}) {
		t.Fatalf("Put with tags outside the grammar = %q, %s, %v; want [v1]", e.Tags, e.Revision, err)
	}
	if e, err := s.Get(ctx, "ns/new", testID); err != nil || !slices.Equal(e.Tags, []string{"v1"}) {
		t.Fatalf("Get after that Put = %q, %v; want [v1]", e.Tags, err)
	}
	if RevisionOf(invalid) != RevisionOf(nil) {
		t.Error("RevisionOf counts tags outside the grammar")
	}
}
