package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Put replaces the entry of key with a full listing taken at scanTime for
// id. The list is stored sorted, without duplicates and without tags outside
// the distribution spec's grammar (see keepValid). changed reports
// whether the revision or the identity differs from the stored one (or
// nothing was stored), which is when policies need evaluating again.
func (s *Store) Put(ctx context.Context, key string, id Identity, tags []string, scanTime time.Time) (e Entry, changed bool, err error) {
	if !id.complete() {
		return Entry{}, false, s.keyError(key, ErrIncompleteIdentity)
	}
	// Sorting and encoding happen before taking the directory.
	sorted := normalize(tags)
	value, rev := encodeTags(sorted)
	e = Entry{Tags: sorted, Revision: rev, ScanTime: scanTime.UTC(), Identity: id}
	metaValue := encodeMeta(meta{Revision: rev, ScanTime: e.ScanTime, Identity: id})

	err = s.txn(ctx, key, true, func(txn *badger.Txn) error {
		old, err := readMeta(txn, key)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		sameList := err == nil && old.Revision == rev
		if sameList && !intact(txn, key, rev) {
			// A damaged list is written again, and its readers were waiting for it.
			sameList, old.Revision = false, ""
		}
		changed = !sameList || old.Identity != id
		if err := s.room(len(metaValue) + len(value)); err != nil {
			return err
		}
		if err := txn.Set(metaKey(key), metaValue); err != nil {
			return err
		}
		if sameList {
			// Rewriting an unchanged list would only feed the value log.
			return nil
		}
		return txn.Set(tagsKey(key), value)
	})
	if err != nil {
		return Entry{}, false, err
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

// AddTo is Add for a caller that read the entry of key a moment before, as base (with Get): when
// the entry still has base's revision, the tags are added to base's list, without reading and
// decoding the stored one again. Otherwise, and for a base without a revision, it is Add for
// base's identity.
func (s *Store) AddTo(ctx context.Context, key string, base Entry, tags []string) (a Addition, err error) {
	id := base.Identity
	if !id.complete() {
		return Addition{}, s.keyError(key, ErrIncompleteIdentity)
	}
	err = s.txn(ctx, key, true, func(txn *badger.Txn) error {
		cur, err := readEntryFrom(txn, key, base)
		if err != nil {
			return err
		}
		merged, added := mergeTags(cur.Tags, tags)
		a = Addition{Entry: cur, From: cur.Revision, Tags: added}
		if len(added) == 0 {
			return nil
		}
		value, rev := encodeTags(merged)
		a.Entry = Entry{Tags: merged, Revision: rev, ScanTime: cur.ScanTime, Identity: id}
		if err := s.room(len(value)); err != nil {
			return err
		}
		if err := txn.Set(metaKey(key), encodeMeta(meta{Revision: rev, ScanTime: cur.ScanTime, Identity: id})); err != nil {
			return err
		}
		return txn.Set(tagsKey(key), value)
	})
	if err != nil {
		return Addition{}, err
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

// mergeTags inserts the tags of add missing from the sorted list, without
// re-sorting a list that may hold 100k tags for the one a push adds. It
// returns the merged list and the tags it inserted, in the order of add;
// tags outside the grammar are not inserted.
func mergeTags(sorted, add []string) ([]string, []string) {
	out := sorted
	var added []string
	for _, t := range add {
		i, found := slices.BinarySearch(out, t)
		if found || invalidTag(t) {
			continue
		}
		if added == nil {
			out = slices.Clone(sorted)
		}
		added = append(added, t)
		out = slices.Insert(out, i, t)
	}
	return out, added
}
