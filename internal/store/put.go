package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Put replaces the entry of key with a full listing taken at scanTime for
// id. The list is stored sorted and without duplicates. changed reports
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
	if !id.complete() {
		return Entry{}, false, s.keyError(key, ErrIncompleteIdentity)
	}
	err = s.txn(ctx, key, true, func(txn *badger.Txn) error {
		cur, err := readEntry(txn, key, id)
		if err != nil {
			return err
		}
		merged, added := mergeTags(cur.Tags, tags)
		e, changed = cur, added
		if !added {
			return nil
		}
		value, rev := encodeTags(merged)
		e = Entry{Tags: merged, Revision: rev, ScanTime: cur.ScanTime, Identity: id}
		if err := s.room(len(value)); err != nil {
			return err
		}
		if err := txn.Set(metaKey(key), encodeMeta(meta{Revision: rev, ScanTime: cur.ScanTime, Identity: id})); err != nil {
			return err
		}
		return txn.Set(tagsKey(key), value)
	})
	if err != nil {
		return Entry{}, false, err
	}
	return e, changed, nil
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
// re-sorting a list that may hold 100k tags for the one a push adds.
func mergeTags(sorted, add []string) ([]string, bool) {
	out := sorted
	added := false
	for _, t := range add {
		i, found := slices.BinarySearch(out, t)
		if found {
			continue
		}
		if !added {
			out = slices.Clone(sorted)
			added = true
		}
		out = slices.Insert(out, i, t)
	}
	return out, added
}
