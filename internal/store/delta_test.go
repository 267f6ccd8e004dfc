package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// header reads the stored header of key and the bytes of its base value.
func header(t testing.TB, s *Store, key string) (meta, []byte) {
	t.Helper()
	var m meta
	var base []byte
	err := s.txn(context.Background(), key, false, func(txn *badger.Txn) (err error) {
		if m, err = readMeta(txn, key); err != nil {
			return err
		}
		item, err := txn.Get(tagsKey(key))
		if err != nil {
			return err
		}
		base, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, base
}

// waitCompacted waits until the background compaction of key left no deltas.
func waitCompacted(t testing.TB, s *Store, key string) meta {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, _ := header(t, s, key)
		if m.Deltas == 0 {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still has %d deltas", key, m.Deltas)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitNoCompaction waits until no compaction of s runs.
func waitNoCompaction(s *Store) {
	for {
		s.mu.Lock()
		busy := len(s.compacting) > 0
		s.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPushIsADelta: a push leaves the base list as it is and writes its tags as a delta with a
// header whose revision chains from the one it extends; every reader merges them.
func TestPushIsADelta(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	s := New(dir)
	t.Cleanup(func() { s.Close() })
	put, _, err := s.Put(ctx, "ns/app", testID, manyTags(1000, "v"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, before := header(t, s, "ns/app")
	a, err := push(ctx, s, "ns/app", testID, []string{"w2", "w1", "v0.0.1-rc.1", "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Tags, []string{"w2", "w1"}) || a.From != put.Revision ||
		a.Entry.Revision != RevisionAfter(put.Revision, []string{"w1", "w2"}) {
		t.Fatalf("push = from %s adding %q to %s", a.From, a.Tags, a.Entry.Revision)
	}
	m, after := header(t, s, "ns/app")
	if !slices.Equal(before, after) || m.Deltas != 1 || m.base() != put.Revision || m.Revision != a.Entry.Revision {
		t.Fatalf("header after a push = %+v; base rewritten: %v", m, !slices.Equal(before, after))
	}
	if s.written.Load() == 0 {
		t.Fatal("no bytes counted")
	}
	want := normalize(append(manyTags(1000, "v"), "w1", "w2"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := New(dir, ReadOnly())
	defer r.Close()
	e, err := r.Get(ctx, "ns/app", testID)
	if err != nil || !slices.Equal(e.Tags, want) || e.Revision != a.Entry.Revision {
		t.Fatalf("reader's Get = %d tags, %s, %v; want %d tags, %s", len(e.Tags), e.Revision, err, len(want), a.Entry.Revision)
	}
	if rev, err := r.Revision(ctx, "ns/app", testID); err != nil || rev != a.Entry.Revision {
		t.Fatalf("Revision = %s, %v", rev, err)
	}
}

// TestEarlierFormatEntry: an entry written before deltas existed, header and list as that
// version wrote them byte for byte, is read as it is, takes deltas, and is replaced by a Put.
func TestEarlierFormatEntry(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	list := []byte(`["1.0.0","1.1.0","latest"]`)
	rev := revisionOfValue(list)
	old := fmt.Sprintf(`{"revision":%q,"scanTime":"2025-01-01T00:00:00Z","identity":{"uid":%q,"image":%q,"listing":%q}}`,
		rev, testID.UID, testID.Image, testID.Listing)
	db, err := badger.Open(New(dir).badgerOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		if err := txn.Set([]byte("meta/ns/old"), []byte(old)); err != nil {
			return err
		}
		return txn.Set([]byte("tags/ns/old"), list)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := New(dir)
	defer s.Close()
	e, err := s.Get(ctx, "ns/old", testID)
	if err != nil || e.Revision != rev || !slices.Equal(e.Tags, []string{"1.0.0", "1.1.0", "latest"}) {
		t.Fatalf("Get of an earlier entry = %+v, %v", e, err)
	}
	// Push finds the header without the index and rebuilds the base once, keeping the revision,
	// then adds the pushed tag as a delta.
	a, err := push(ctx, s, "ns/old", testID, []string{"2.0.0"})
	if err != nil || a.Entry.Revision != RevisionAfter(rev, []string{"2.0.0"}) {
		t.Fatalf("push to an earlier entry = %+v, %v", a, err)
	}
	want := []string{"1.0.0", "1.1.0", "2.0.0", "latest"}
	if e, err := s.Get(ctx, "ns/old", testID); err != nil || !slices.Equal(e.Tags, want) || e.Revision != a.Entry.Revision {
		t.Fatalf("Get after the push = %+v, %v", e, err)
	}
	if m, base := header(t, s, "ns/old"); !m.Indexed || m.Deltas != 1 || m.base() != rev || string(base) != `["1.0.0","1.1.0","latest"]` {
		t.Fatalf("after the first Push: header %+v, base %s", m, base)
	}
	if p, err := s.Push(ctx, "ns/old", testID, []string{"latest", "1.1.0", "2.0.0"}, ""); err != nil || len(p.Tags) != 0 ||
		p.Revision != a.Entry.Revision || p.Count != 4 || !slices.Equal(p.Latest, want) {
		t.Fatalf("Push of held tags to an earlier entry = %+v, %v", p, err)
	}
	// The listing of the same tags compacts the entry without moving its revision.
	p, changed, err := s.Put(ctx, "ns/old", testID, want, time.Now())
	if err != nil || changed || p.Revision != a.Entry.Revision {
		t.Fatalf("Put of the list held = %s, changed %v, %v; want %s unchanged", p.Revision, changed, err, a.Entry.Revision)
	}
	m, base := header(t, s, "ns/old")
	if m.Deltas != 0 || m.Revision != a.Entry.Revision || string(base) != `["1.0.0","1.1.0","2.0.0","latest"]` {
		t.Fatalf("after the Put: header %+v, base %s", m, base)
	}
	// Another list is a change, with the revision of the list.
	p, changed, err = s.Put(ctx, "ns/old", testID, []string{"3.0.0"}, time.Now())
	if err != nil || !changed || p.Revision != RevisionOf([]string{"3.0.0"}) {
		t.Fatalf("Put of another list = %s, changed %v, %v", p.Revision, changed, err)
	}
	if m, _ := header(t, s, "ns/old"); m.Deltas != 0 || m.Base != "" || m.BaseHash != "" {
		t.Fatalf("header after a Put = %+v, want the earlier format's fields only", m)
	}
}

// TestCompaction: deltas past the bound are compacted in the background into a base that holds
// the merged list, under the same revision.
func TestCompaction(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, WithLinger(time.Hour))
	e, _, err := s.Put(ctx, "ns/app", testID, manyTags(100, "v"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range minDeltas {
		a, err := push(ctx, s, "ns/app", testID, []string{fmt.Sprintf("push-%03d", i)})
		if err != nil {
			t.Fatal(err)
		}
		e = a.Entry
	}
	m := waitCompacted(t, s, "ns/app")
	_, base := header(t, s, "ns/app")
	if m.Revision != e.Revision || m.baseHash() != RevisionOf(e.Tags) || string(base) != string(must(encodeTags(e.Tags))) {
		t.Fatalf("compacted header %+v", m)
	}
	got, err := s.Get(ctx, "ns/app", testID)
	if err != nil || !entriesEqual(got, e) {
		t.Fatalf("Get after compaction = %d tags %s, %v", len(got.Tags), got.Revision, err)
	}
	if s.compacted.Load() < int64(len(base)) {
		t.Fatalf("compaction counted %d bytes for a base of %d", s.compacted.Load(), len(base))
	}
}

func must(b []byte, _ string) []byte { return b }

// plantDeltas writes n deltas of one tag each to the entry of key in dir through Badger
// directly, as a writer that ended before compacting them would have left them.
func plantDeltas(t *testing.T, dir, key string, n int) Entry {
	t.Helper()
	s := New(dir)
	db, err := badger.Open(s.badgerOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	err = db.View(func(txn *badger.Txn) error {
		m, err := readMeta(txn, key)
		if err != nil {
			return err
		}
		e, err = readTags(txn, key, m)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		err := db.Update(func(txn *badger.Txn) error {
			m, err := readMeta(txn, key)
			if err != nil {
				return err
			}
			merged, added := mergeTags(e.Tags, []string{fmt.Sprintf("crash-%05d", i)})
			next, _, err := s.addDelta(txn, key, m, added, merged)
			e = Entry{Tags: merged, Revision: next.Revision, ScanTime: m.ScanTime, Identity: m.Identity}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestCrashBeforeCompaction: deltas that a writer left due for compaction read whole after a
// reopen; the next push compacts them, in the background while they are due and at once once
// they are overdue.
func TestCrashBeforeCompaction(t *testing.T) {
	ctx := testCtx(t)
	for _, tt := range []struct {
		name   string
		deltas int
	}{{"due", minDeltas + 3}, {"overdue", overdueFactor * maxDeltas}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := New(dir)
			if _, _, err := s.Put(ctx, "ns/app", testID, manyTags(10, "v"), time.Now()); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			want := plantDeltas(t, dir, "ns/app", tt.deltas)

			s = New(dir, WithLinger(time.Hour))
			defer s.Close()
			e, err := s.Get(ctx, "ns/app", testID)
			if err != nil || !entriesEqual(e, want) {
				t.Fatalf("Get after the crash = %d tags %s, %v; want %d tags %s", len(e.Tags), e.Revision, err, len(want.Tags), want.Revision)
			}
			if m, _ := header(t, s, "ns/app"); m.Deltas != tt.deltas {
				t.Fatalf("%d deltas stored, want %d", m.Deltas, tt.deltas)
			}
			a, err := push(ctx, s, "ns/app", testID, []string{"after"})
			if err != nil {
				t.Fatal(err)
			}
			if tt.deltas >= overdueFactor*maxDeltas {
				if m, _ := header(t, s, "ns/app"); m.Deltas != 0 {
					t.Fatalf("an overdue push left %d deltas", m.Deltas)
				}
			}
			m := waitCompacted(t, s, "ns/app")
			if m.Revision != RevisionAfter(want.Revision, []string{"after"}) {
				t.Fatalf("revision %s after the push", m.Revision)
			}
			if got, err := s.Get(ctx, "ns/app", testID); err != nil || !entriesEqual(got, a.Entry) {
				t.Fatalf("Get after compaction = %d tags, %v", len(got.Tags), err)
			}
		})
	}
}

// TestDamagedDeltaIsReported: a delta that does not chain to the header's revision makes the
// entry ErrCorrupt, never a list without it, and a Put replaces it.
func TestDamagedDeltaIsReported(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	s := New(dir)
	if _, _, err := s.Put(ctx, "ns/app", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := push(ctx, s, "ns/app", testID, []string{"v2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := badger.Open(s.badgerOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		m, err := readMeta(txn, "ns/app")
		if err != nil {
			return err
		}
		return txn.Set(deltaKey("ns/app", m.Gen, 1), []byte(`["v3"]`))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = New(dir)
	defer s.Close()
	if _, err := s.Get(ctx, "ns/app", testID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a damaged delta = %v, want ErrCorrupt", err)
	}
	// A push reads neither the list nor the deltas, so it adds to the entry all the same; the
	// damage stays visible to every reader of the list.
	if _, err := s.Push(ctx, "ns/app", testID, []string{"v4"}, ""); err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Push to a damaged delta = %v", err)
	}
	if _, err := s.Get(ctx, "ns/app", testID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get after a push to a damaged delta = %v, want ErrCorrupt", err)
	}
	if _, changed, err := s.Put(ctx, "ns/app", testID, []string{"v1", "v2"}, time.Now()); err != nil || !changed {
		t.Fatalf("Put over a damaged delta = changed %v, %v", changed, err)
	}
	if e, err := s.Get(ctx, "ns/app", testID); err != nil || !slices.Equal(e.Tags, []string{"v1", "v2"}) {
		t.Fatalf("Get after the Put = %+v, %v", e, err)
	}
}

// chain checks that additions, in any order, lead from one revision to another one step at a
// time, each step RevisionAfter its added tags.
func chain(t *testing.T, from, to string, adds []Pushed) {
	t.Helper()
	next := map[string]Pushed{}
	for _, a := range adds {
		if len(a.Tags) == 0 {
			continue
		}
		if a.Revision != RevisionAfter(a.From, a.Tags) {
			t.Fatalf("addition of %q from %s leads to %s", a.Tags, a.From, a.Revision)
		}
		if _, dup := next[a.From]; dup {
			t.Fatalf("two additions from %s", a.From)
		}
		next[a.From] = a
	}
	rev := from
	for range next {
		a, ok := next[rev]
		if !ok {
			break
		}
		rev = a.Revision
	}
	if rev != to {
		t.Fatalf("the additions lead to %s, the store holds %s", rev, to)
	}
}

// TestConcurrentPushesAndCompaction: goroutines pushing to one repository, while readers and
// compactions run in between, lose no tag, and their additions form one chain
// of revisions from the listing to the stored one.
func TestConcurrentPushesAndCompaction(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, WithLinger(time.Hour))
	put, _, err := s.Put(ctx, "ns/app", testID, manyTags(200, "v"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const workers, pushes = 8, 40
	var (
		mu   sync.Mutex
		adds []Pushed
		revs revisions
		wg   sync.WaitGroup
	)
	errs := make(chan error, workers*pushes)
	for w := range workers {
		wg.Go(func() {
			for i := range pushes {
				tags := []string{fmt.Sprintf("w%d-%03d", w, i), fmt.Sprintf("shared-%03d", i)}
				p, err := s.Push(ctx, "ns/app", testID, tags, "")
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				adds = append(adds, p)
				mu.Unlock()
				if i%7 == 0 {
					// Another reader now and then: the compaction and the pushes race it.
					held, err := s.Get(ctx, "ns/app", testID)
					if err != nil {
						errs <- err
						return
					}
					if err := revs.check(held); err != nil {
						errs <- err
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			s.compactSoon("ns/app")
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := manyTags(200, "v")
	for w := range workers {
		for i := range pushes {
			want = append(want, fmt.Sprintf("w%d-%03d", w, i), fmt.Sprintf("shared-%03d", i))
		}
	}
	want = normalize(want)
	e, err := s.Get(ctx, "ns/app", testID)
	if err != nil || !slices.Equal(e.Tags, want) {
		t.Fatalf("Get = %d tags, %v; want %d", len(e.Tags), err, len(want))
	}
	if err := revs.check(e); err != nil {
		t.Fatal(err)
	}
	chain(t, put.Revision, e.Revision, adds)
	// The compactions that raced the pushes may all have lost; one that runs alone does not.
	waitNoCompaction(s)
	if m, _ := header(t, s, "ns/app"); m.compactionDue() {
		s.compactSoon("ns/app")
		waitCompacted(t, s, "ns/app")
	}
	if s.compacted.Load() == 0 {
		t.Fatal("no compaction ran")
	}
	if got, err := s.Get(ctx, "ns/app", testID); err != nil || !entriesEqual(got, e) {
		t.Fatalf("Get after compaction = %d tags, %v", len(got.Tags), err)
	}
}

// Tags at the edges of the grammar, and outside it, for the property test.
var edgeTags = []string{
	"a", "A", "_", "0", "v1", "v1.0", "v1.0.0", "v1.0.0-rc.1", "1.0.0", "latest", "a-b", "a.b", "a_b", "a__b", "Z9",
	strings.Repeat("x", 128), strings.Repeat("y", 127) + "z",
	// Outside: empty, too long, leading period or dash, a plus, a slash, a space, not ASCII.
	"", strings.Repeat("x", 129), ".a", "-a", "1.0.0+b", "a/b", "a b", "é",
}

// model is what a full rewrite would hold: the stored list and revision, and the revisions
// seen.
type model struct {
	tags []string
	rev  string
	revs revisions
}

// runOps interprets ops as a sequence of Put, a push read back with Get, Get, Missing with Push,
// and reopen on key of the store in dir, checking after each step that the store reads as
// m, the list a full rewrite would hold. It returns the store, which the caller closes.
func runOps(t *testing.T, s *Store, dir, key string, ops []byte) *Store {
	t.Helper()
	ctx := context.Background()
	var m model
	next := func() int {
		if len(ops) == 0 {
			return 0
		}
		b := ops[0]
		ops = ops[1:]
		return int(b)
	}
	pick := func() []string {
		n := next()%4 + 1
		var tags []string
		for range n {
			v := next()
			if v%3 == 0 {
				tags = append(tags, edgeTags[v%len(edgeTags)])
			} else {
				tags = append(tags, fmt.Sprintf("t%02d", v%40))
			}
		}
		return tags
	}
	check := func(step string) {
		e, err := s.Get(ctx, key, testID)
		if m.rev == "" {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: Get of a new key = %v", step, err)
			}
			return
		}
		if err != nil || !slices.Equal(e.Tags, m.tags) || e.Revision != m.rev {
			t.Fatalf("%s: Get = %q %s, %v; want %q %s", step, e.Tags, e.Revision, err, m.tags, m.rev)
		}
		if err := m.revs.check(e); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	for len(ops) > 0 {
		switch op := next() % 7; op {
		case 0:
			tags := pick()
			e, changed, err := s.Put(ctx, key, testID, tags, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			want := normalize(tags)
			same := m.rev != "" && slices.Equal(want, m.tags)
			if changed == same || !slices.Equal(e.Tags, want) || same && e.Revision != m.rev {
				t.Fatalf("Put %q over %q = %q %s, changed %v", tags, m.tags, e.Tags, e.Revision, changed)
			}
			m.tags, m.rev = want, e.Revision
		case 1, 2, 3:
			tags := pick()
			a, err := push(ctx, s, key, testID, tags)
			if m.rev == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("push to a new key = %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			want := normalize(append(slices.Clone(m.tags), tags...))
			var added []string
			for _, tag := range normalize(tags) {
				if _, found := slices.BinarySearch(m.tags, tag); !found {
					added = append(added, tag)
				}
			}
			if a.From != m.rev || !slices.Equal(normalize(a.Tags), added) || a.Entry.Revision != RevisionAfter(m.rev, added) {
				t.Fatalf("push %q to %q = from %s adding %q to %s", tags, m.tags, a.From, a.Tags, a.Entry.Revision)
			}
			if !slices.Equal(a.Entry.Tags, want) {
				t.Fatalf("push %q to %q returned %q", tags, m.tags, a.Entry.Tags)
			}
			m.tags, m.rev = want, a.Entry.Revision
		case 4:
			check("get")
		case 5:
			if next()%8 != 0 {
				continue
			}
			// A reopen: the deltas and any due compaction are read from disk.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = New(dir, WithLinger(time.Hour))
		case 6:
			tags := pick()
			missing, at, merr := s.Missing(ctx, key, testID, tags)
			if next()%2 == 0 {
				// As the scan pushes: only what Missing found, at its revision.
				tags = missing
			} else {
				at = ""
			}
			p, err := s.Push(ctx, key, testID, tags, at)
			if m.rev == "" {
				if !errors.Is(err, ErrNotFound) || !errors.Is(merr, ErrNotFound) {
					t.Fatalf("Push to a new key = %v, Missing %v", err, merr)
				}
				continue
			}
			if err != nil || merr != nil {
				t.Fatal(err, merr)
			}
			var added []string
			for _, tag := range tags {
				_, found := slices.BinarySearch(m.tags, tag)
				if !found && !invalidTag(tag) && !slices.Contains(added, tag) {
					added = append(added, tag)
				}
			}
			want := normalize(append(slices.Clone(m.tags), tags...))
			if !slices.Equal(missing, added) || !slices.Equal(p.Tags, added) || p.From != m.rev ||
				p.Revision != RevisionAfter(m.rev, added) || p.Count != len(want) ||
				!slices.Equal(p.Latest, want[max(0, len(want)-TailTags):]) {
				t.Fatalf("Push %q to %q = %+v, Missing %q; want %q added", tags, m.tags, p, missing, added)
			}
			m.tags, m.rev = want, p.Revision
		}
		check("after the step")
	}
	return s
}

// TestDeltasReadAsAFullRewrite: random sequences of Put, pushes, Missing with Push,
// reads and reopens, with duplicates and tags at and past the grammar's edges, always
// read as the list a full rewrite would hold, under revisions that each name one list.
func TestDeltasReadAsAFullRewrite(t *testing.T) {
	dir := t.TempDir()
	s := New(dir, WithLinger(time.Hour))
	rng := rand.New(rand.NewPCG(49, 1))
	n := 40
	if testing.Short() {
		n = 10
	}
	for k := range n {
		ops := make([]byte, 200+rng.IntN(400))
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
		}
		// Most keys start with a listing, so that additions have something to add to.
		ops[0] = 0
		s = runOps(t, s, dir, fmt.Sprintf("ns/k%d", k), ops)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// FuzzDeltas is TestDeltasReadAsAFullRewrite for sequences the fuzzer makes. Each input works on
// a key of its own in a store shared by inputsPerStore inputs, so that an input costs its
// operations, neither an open of Badger nor, as one store would grow with every input before
// it, the reopens and compactions of all that came before.
func FuzzDeltas(f *testing.F) {
	f.Add([]byte{0, 2, 1, 2, 2, 3, 4, 4, 5, 2, 1, 9, 0, 1, 2, 5})
	f.Add([]byte{0, 1, 3, 2, 2, 2, 7, 8, 9, 3, 1, 1, 0, 3, 6, 2, 4, 5, 0, 0})
	const inputsPerStore = 200
	base := f.TempDir()
	var (
		s      *Store
		dir    string
		inputs int
	)
	f.Cleanup(func() {
		if s != nil {
			s.Close()
		}
	})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 512 {
			return
		}
		if inputs%inputsPerStore == 0 {
			if s != nil {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			dir = filepath.Join(base, fmt.Sprint(inputs/inputsPerStore))
			s = New(dir, WithLinger(time.Hour))
		}
		inputs++
		s = runOps(t, s, dir, fmt.Sprintf("ns/fuzz-%d", inputs), ops)
	})
}

// deltaRecords counts the records under the deltas prefix of key, and those of them that belong
// to the generation its header names.
func deltaRecords(t *testing.T, s *Store, key string) (all, current int) {
	t.Helper()
	err := s.txn(context.Background(), key, false, func(txn *badger.Txn) error {
		m, err := readMeta(txn, key)
		gone := errors.Is(err, ErrNotFound)
		if err != nil && !gone {
			return err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: deltasKey(key)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			all++
			if !gone && ofGen(it.Item().Key(), key, m.Gen) {
				current++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all, current
}

// TestSweep: the delta records and markers of a base that a compaction, a Put or a deletion
// replaced are swept in the background, more of them than Badger takes in one transaction.
func TestSweep(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, WithLinger(time.Hour))
	if _, _, err := s.Put(ctx, "ns/app", testID, manyTags(10, "v"), time.Now()); err != nil {
		t.Fatal(err)
	}
	// Deltas of two tags each, that no compaction takes: the base is too large for them.
	push := func(from, n int) {
		for i := from; i < from+n; i++ {
			tags := []string{fmt.Sprintf("p%05da", i), fmt.Sprintf("p%05db", i)}
			if p, err := s.Push(ctx, "ns/app", testID, tags, ""); err != nil || len(p.Tags) != 2 {
				t.Fatal(p, err)
			}
		}
	}
	push(0, 40)
	if all, cur := deltaRecords(t, s, "ns/app"); all != 120 || cur != 120 {
		t.Fatalf("%d records, %d of the generation, after 40 pushes", all, cur)
	}
	e, err := s.Get(ctx, "ns/app", testID)
	if err != nil {
		t.Fatal(err)
	}
	// A Put of the list held writes no list but a new generation; the sweep takes the old one.
	if _, changed, err := s.Put(ctx, "ns/app", testID, e.Tags, time.Now()); err != nil || changed {
		t.Fatal(changed, err)
	}
	waitNoCompaction(s)
	if all, _ := deltaRecords(t, s, "ns/app"); all != 0 {
		t.Fatalf("%d records after the Put's sweep", all)
	}
	// More records than one transaction of the sweep deletes.
	push(100, sweepBatch)
	if _, _, err := s.Put(ctx, "ns/app", testID, []string{"v1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitNoCompaction(s)
	if all, _ := deltaRecords(t, s, "ns/app"); all != 0 {
		t.Fatalf("%d records after the sweep of %d", all, 3*sweepBatch)
	}
	push(5000, 3)
	if ok, err := s.Delete(ctx, "ns/app"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	waitNoCompaction(s)
	if all, _ := deltaRecords(t, s, "ns/app"); all != 0 {
		t.Fatalf("%d records after the deletion's sweep", all)
	}
}

// TestSearchBase: the binary search of a stored list finds every tag it holds and none other,
// at the edges of the list and of the tags' order.
func TestSearchBase(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10, 257} {
		list := manyTags(n, "v")
		list = normalize(append(list, "A", "z", "_x", "v.1"))
		value, _ := encodeTags(list)
		for _, tag := range list {
			if ok, err := searchBase(value, tag); !ok || err != nil {
				t.Fatalf("%d tags: %q not found: %v", len(list), tag, err)
			}
			for _, other := range []string{tag + "0", tag[:len(tag)-1], tag + "-", "0" + tag} {
				if _, held := slices.BinarySearch(list, other); held {
					continue
				}
				if ok, err := searchBase(value, other); ok || err != nil {
					t.Fatalf("%d tags: %q found: %v", len(list), other, err)
				}
			}
		}
	}
	if _, err := searchBase([]byte(`["a","b\u003c"]`), "b\u003c"); err == nil {
		t.Fatal("a list with escapes was searched")
	}
}
