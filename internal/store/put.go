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
// entry already holds keeps its revision. With HandOverListings, a changed entry hands the
// directory over.
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
	if changed && s.opts.handOver {
		s.handOver()
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
