package store

import (
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
)

// A push adds its tags as a delta record next to the entry's base list, so that its cost does
// not grow with the list: the record holds the added tags, the header the revision they lead
// to (RevisionAfter). Readers merge base and deltas. Once the deltas are many, or large next to
// the base, they are compacted into a new base, in the background after the write that made
// them so, and by a push itself only when that did not happen (the process ended first).
const (
	// minDeltas deltas are compacted once their bytes reach 1/deltaShare of the base's: then a
	// compaction, which writes the whole list, costs a push deltaShare times its own delta
	// bytes, however large the list.
	minDeltas  = 64
	deltaShare = 8
	// maxDeltas and maxDeltaBytes bound what a reader merges whatever the base's size.
	maxDeltas     = 8192
	maxDeltaBytes = 1 << 20
	// A push that finds twice the bounds compacts them itself: the background compaction was
	// lost.
	overdueFactor = 2
)

// compactionDue tells whether the deltas of m are to be compacted.
func (m meta) compactionDue() bool {
	return m.Deltas >= maxDeltas || m.DeltaBytes >= maxDeltaBytes ||
		m.Deltas >= minDeltas && m.DeltaBytes*deltaShare >= m.BaseBytes
}

// compactionOverdue tells whether the deltas of m are past what background compaction lets
// pile up.
func (m meta) compactionOverdue() bool {
	return m.Deltas >= overdueFactor*maxDeltas || m.DeltaBytes >= overdueFactor*maxDeltaBytes
}

// readDeltas returns the tags the deltas of the entry of key with header m add to its base,
// checking that they chain from its base's revision to its revision.
func readDeltas(txn *badger.Txn, key string, m meta) ([]string, error) {
	var added []string
	rev := m.base()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: genKey(key, m.Gen)})
	defer it.Close()
	n := 0
	for it.Rewind(); it.Valid() && n < m.Deltas; it.Next() {
		n++
		if k := it.Item().Key(); !slices.Equal(k, deltaKey(key, m.Gen, n)) {
			return nil, fmt.Errorf("%w: delta %d missing, found %q", ErrCorrupt, n, k)
		}
		err := it.Item().Value(func(b []byte) error {
			tags, err := parseTags(b)
			if err != nil {
				return fmt.Errorf("%w: delta %d: %v", ErrCorrupt, n, err)
			}
			added = append(added, tags...)
			rev = chainValue(rev, b)
			return nil
		})
		if err != nil {
			return nil, readError(err)
		}
	}
	if n < m.Deltas {
		return nil, fmt.Errorf("%w: %d of %d deltas", ErrCorrupt, n, m.Deltas)
	}
	if rev != m.Revision {
		return nil, fmt.Errorf("%w: deltas lead to %s, metadata says %s", ErrCorrupt, rev, m.Revision)
	}
	return added, nil
}

// union merges two sorted lists without duplicates into one.
func union(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	out := make([]string, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0] < b[0]:
			out, a = append(out, a[0]), a[1:]
		case b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	out = append(out, a...)
	return append(out, b...)
}

// addDelta writes added, tags the entry of key with header m lacks, as its next delta and
// returns the new header and the bytes written. Past the overdue bound it writes the whole new
// list as the base instead: merged when the caller has it, read otherwise.
func (s *Store) addDelta(txn *badger.Txn, key string, m meta, added, merged []string) (meta, int, error) {
	sorted := normalize(added)
	value, _ := encodeTags(sorted)
	next := m
	next.Revision = chainValue(m.Revision, value)
	if m.compactionOverdue() {
		if merged == nil {
			e, err := readTags(txn, key, m)
			if err != nil {
				return meta{}, 0, err
			}
			merged = union(e.Tags, sorted)
		}
		v, hash := encodeTags(merged)
		return s.writeBase(txn, key, next, encodedList{tags: merged, value: v, hash: hash}, true)
	}
	next.Base, next.BaseHash = m.base(), m.baseHash()
	next.Deltas++
	next.DeltaBytes += len(value)
	var markers [][]byte
	if m.Indexed {
		next.Count += len(sorted)
		next.Tail = tailOf(union(m.Tail, sorted))
		for _, tag := range sorted {
			markers = append(markers, markerKey(key, m.Gen, tag))
		}
	}
	mv, dk := encodeMeta(next), deltaKey(key, m.Gen, next.Deltas)
	n := len(dk) + len(value) + len(metaKey(key)) + len(mv)
	for _, k := range markers {
		n += len(k)
	}
	if err := s.room(n); err != nil {
		return meta{}, 0, err
	}
	if err := txn.Set(dk, value); err != nil {
		return meta{}, 0, err
	}
	for _, k := range markers {
		if err := txn.Set(k, nil); err != nil {
			return meta{}, 0, err
		}
	}
	return next, n, txn.Set(metaKey(key), mv)
}

// encodedList is a tag list, its encoding as encodeTags encodes it, and its hash.
type encodedList struct {
	tags  []string
	value []byte
	hash  string
}

// writeBase writes list as the base list of key with header m, keeping m's revision and
// starting a generation without deltas; the stored list is written again only when rewrite. It
// returns the new header and the bytes written. The deltas of the generation it ends are left
// for sweepDeltas: deleting them here could make the transaction too large for Badger.
func (s *Store) writeBase(txn *badger.Txn, key string, m meta, list encodedList, rewrite bool) (meta, int, error) {
	value, tags := list.value, list.tags
	m.Base, m.BaseHash, m.BaseBytes = "", list.hash, len(value)
	m.Deltas, m.DeltaBytes = 0, 0
	m.Gen = newGen()
	m.setIndex(tags)
	mv := encodeMeta(m)
	n := len(metaKey(key)) + len(mv)
	if rewrite {
		n += len(tagsKey(key)) + len(value)
	}
	if err := s.room(n); err != nil {
		return meta{}, 0, err
	}
	if rewrite {
		if err := txn.Set(tagsKey(key), value); err != nil {
			return meta{}, 0, err
		}
	}
	return m, n, txn.Set(metaKey(key), mv)
}

// sweepBatch bounds the records one transaction of sweepDeltas deletes, well within what Badger
// takes in one transaction with the memtable of badgerOptions.
const sweepBatch = 1000

// sweepDeltas deletes, in transactions of at most sweepBatch records, the delta records and
// markers of key that belong to no generation its header names: all of them once the entry is
// deleted. It returns the bytes of the keys deleted.
func (s *Store) sweepDeltas(db *badger.DB, key string) (int, error) {
	total := 0
	for {
		n := 0
		err := db.Update(func(txn *badger.Txn) error {
			n = 0
			m, err := readMeta(txn, key)
			gone := errors.Is(err, ErrNotFound)
			if err != nil && !gone {
				return err
			}
			var keys [][]byte
			it := txn.NewIterator(badger.IteratorOptions{Prefix: deltasKey(key)})
			for it.Rewind(); it.Valid() && len(keys) < sweepBatch; it.Next() {
				if k := it.Item().Key(); gone || !ofGen(k, key, m.Gen) {
					keys = append(keys, it.Item().KeyCopy(nil))
				}
			}
			it.Close()
			for _, k := range keys {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			for _, k := range keys {
				n += len(k)
			}
			return nil
		})
		if errors.Is(err, badger.ErrConflict) {
			continue
		}
		if err != nil || n == 0 {
			return total, err
		}
		total += n
	}
}

// compact writes the entry of key, base and deltas merged, as its new base when its deltas are
// due for it, keeping its revision. It returns the bytes written. A damaged entry stays as it
// is, for a Put to replace.
func (s *Store) compact(txn *badger.Txn, key string) (int, error) {
	m, err := readMeta(txn, key)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil || !m.compactionDue() {
		return 0, err
	}
	e, err := readTags(txn, key, m)
	if err != nil {
		return 0, err
	}
	value, hash := encodeTags(e.Tags)
	_, n, err := s.writeBase(txn, key, m, encodedList{tags: e.Tags, value: value, hash: hash}, true)
	return n, err
}

// compactSoon compacts the deltas of key in the background, off the path of the push that made
// them due, and then sweeps the records of generations that no base uses any more
// (sweepDeltas): a caller that wrote a base over deltas calls it for that alone. Like a flush it counts as a call in flight and runs only while the database is open
// and admits calls; one per key at a time. A compaction that a push overtakes (a conflict) is
// tried again; one that never runs is done by a later push (compactionOverdue).
func (s *Store) compactSoon(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateOpen || s.draining || s.closed || s.compacting[key] {
		return
	}
	if s.compacting == nil {
		s.compacting = map[string]bool{}
	}
	s.compacting[key] = true
	s.users++
	db := s.db
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.compacting, key)
			s.mu.Unlock()
			s.release()
		}()
		s.compactNow(db, key)
		n, err := s.sweepDeltas(db, key)
		if err != nil {
			s.opts.logger.Warn("sweeping the deltas of the tag store", "dir", s.dir, "key", key, "error", err)
		}
		s.count(n, metrics.StoreWriteCompaction)
		if n > 0 {
			s.flushSoon()
		}
	}()
}

// compactNow compacts the deltas of key if they are due, trying again when a push overtakes it.
func (s *Store) compactNow(db *badger.DB, key string) {
	for range 3 {
		n := 0
		err := db.Update(func(txn *badger.Txn) (err error) {
			n, err = s.compact(txn, key)
			return err
		})
		if errors.Is(err, badger.ErrConflict) {
			continue
		}
		if err != nil {
			s.opts.logger.Warn("compacting the deltas of the tag store", "dir", s.dir, "key", key, "error", err)
			return
		}
		s.count(n, metrics.StoreWriteCompaction)
		s.flushSoon()
		return
	}
}
