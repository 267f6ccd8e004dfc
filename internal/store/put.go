package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
)

// Put replaces the entry of key with a full listing taken at scanTime for
// id. The list is stored sorted, without duplicates and without tags outside
// the distribution spec's grammar (see keepValid), as the new base of the
// entry: the deltas of pushes go in the same transaction. changed reports
// whether the list or the identity differs from the stored one (or nothing
// was stored), which is when policies need evaluating again; the list an
// entry already holds keeps its revision.
func (s *Store) Put(ctx context.Context, key string, id Identity, tags []string, scanTime time.Time) (e Entry, changed bool, err error) {
	if !id.complete() {
		return Entry{}, false, s.keyError(key, ErrIncompleteIdentity)
	}
	// Sorting and encoding happen before taking the directory.
	sorted := normalize(tags)
	value, hash := encodeTags(sorted)
	e = Entry{Tags: sorted, ScanTime: scanTime.UTC(), Identity: id}
	written, swept := 0, false
	err = s.txn(ctx, key, true, func(txn *badger.Txn) error {
		old, err := readMeta(txn, key)
		swept = err == nil && old.Deltas > 0
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		// sameList: the entry holds this list; sameBase: as its base value, intact.
		sameList, sameBase := false, false
		if err == nil {
			if old.Deltas == 0 {
				sameBase = old.baseHash() == hash && intact(txn, key, hash)
				sameList = sameBase
			} else if old.Identity == id {
				cur, err := readTags(txn, key, old)
				sameList = err == nil && slices.Equal(cur.Tags, sorted)
			}
		}
		m := meta{Revision: hash, ScanTime: e.ScanTime, Identity: id}
		if sameList && old.Identity == id {
			m.Revision = old.Revision
		}
		changed = !sameList || old.Identity != id
		// Rewriting an unchanged base would only feed the value log.
		m, written, err = s.writeBase(txn, key, m, encodedList{tags: sorted, value: value, hash: hash}, !sameBase)
		e.Revision = m.Revision
		return err
	})
	if err != nil {
		return Entry{}, false, err
	}
	s.count(written, metrics.StoreWriteListing)
	if swept {
		// The deltas the new base replaced are left for the sweep.
		s.compactSoon(key)
	}
	return e, changed, nil
}

// AddTags adds tags to the entry of key in one transaction, as a push event
// does, keeping its scan time. It returns the resulting entry and whether
// any tag was new. A key without an entry is ErrNotFound, and one listed for
// another identity than id is ErrOtherIdentity: a partial list must never
// stand in for a full listing, so the first write for an identity is Put's.
func (s *Store) AddTags(ctx context.Context, key string, id Identity, tags []string) (e Entry, changed bool, err error) {
	a, err := s.Add(ctx, key, id, tags)
	return a.Entry, len(a.Tags) > 0, err
}

// Addition is what Add did to an entry: the entry after it, the revision it
// started from, and the tags it added, which the entry did not hold before.
// Entry.Revision equals From when Tags is empty.
type Addition struct {
	Entry Entry
	From  string
	Tags  []string
}

// Add is AddTags that also tells which revision the tags were added to and
// which of them were new, read in the same transaction that wrote them: a
// reader that holds the list of revision From holds the list of
// Entry.Revision once it adds Tags.
func (s *Store) Add(ctx context.Context, key string, id Identity, tags []string) (a Addition, err error) {
	return s.AddTo(ctx, key, Entry{Identity: id}, tags)
}

// AddTo is Add for a caller that read the entry of key a moment before, as base (with Get):
// when the entry still has base's revision, the tags are added to base's list, without reading
// the stored one again. Otherwise, and for a base without a revision, it is Add for base's
// identity. The tags are written as a delta record next to the entry's base list, with the
// header that records the new revision (RevisionAfter): with a base of the stored revision, the
// cost of adding a tag is the same for a list of 100 tags and one of 100,000.
func (s *Store) AddTo(ctx context.Context, key string, base Entry, tags []string) (a Addition, err error) {
	id := base.Identity
	if !id.complete() {
		return Addition{}, s.keyError(key, ErrIncompleteIdentity)
	}
	written, due := 0, false
	err = s.txn(ctx, key, true, func(txn *badger.Txn) error {
		written, due = 0, false
		m, err := readMetaOf(txn, key, id)
		if err != nil {
			return err
		}
		cur := base.Tags
		if base.Revision == "" || base.Revision != m.Revision {
			e, err := readTags(txn, key, m)
			if err != nil {
				return err
			}
			cur = e.Tags
		}
		merged, added := mergeTags(cur, tags)
		a = Addition{Entry: Entry{Tags: cur, Revision: m.Revision, ScanTime: m.ScanTime, Identity: m.Identity},
			From: m.Revision, Tags: added}
		if len(added) == 0 {
			return nil
		}
		next, n, err := s.addDelta(txn, key, m, added, merged)
		if err != nil {
			return err
		}
		a.Entry.Tags, a.Entry.Revision = merged, next.Revision
		// A base written over the deltas leaves them for the sweep.
		written, due = n, next.compactionDue() || next.Gen != m.Gen
		return nil
	})
	if err != nil {
		return Addition{}, err
	}
	s.count(written, metrics.StoreWritePush)
	if due {
		s.compactSoon(key)
	}
	return a, nil
}

// intact tells whether the stored tags of key still hash to rev.
func intact(txn *badger.Txn, key, rev string) bool {
	item, err := txn.Get(tagsKey(key))
	if err != nil {
		return false
	}
	ok := false
	err = item.Value(func(b []byte) error {
		ok = revisionOfValue(b) == rev
		return nil
	})
	return err == nil && ok
}

// mergeTags merges the tags of add missing from the sorted list into a copy of it, or returns
// the list itself when none is missing. It returns the merged list and the tags it inserted, in
// the order of add; tags outside the grammar are not inserted.
func mergeTags(sorted, add []string) ([]string, []string) {
	var added []string
	for _, t := range add {
		if invalidTag(t) || slices.Contains(added, t) {
			continue
		}
		if _, found := slices.BinarySearch(sorted, t); !found {
			added = append(added, t)
		}
	}
	if len(added) == 0 {
		return sorted, nil
	}
	return union(sorted, normalize(added)), added
}
