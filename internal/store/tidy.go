package store

import (
	"cmp"
	"errors"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Value-log upkeep. Badger never reclaims value-log space by itself, and it
// starts a new value-log file at every read-write open, so a store opened
// for short sessions would otherwise grow one file per session for ever
// (measured: 1,000 files and a 127 ms read-only open after 1,000 sessions).
const (
	// gcDiscardRatio is the share of stale data at which Badger rewrites a
	// value-log file.
	gcDiscardRatio = 0.5
	// tidyGCBudget bounds the value-log GC a writer runs when it closes.
	tidyGCBudget = 100 * time.Millisecond
	// maxValueLogFiles is how many value-log files a writer lets pile up
	// before it rewrites the oldest lists.
	maxValueLogFiles = 16
	// rewriteBudget bounds the bytes of lists one close rewrites, so that
	// the work, and the pages it maps, stay small however big the store.
	rewriteBudget = 4 << 20
	// rewriteChunk bounds the bytes of lists one transaction rewrites.
	rewriteChunk = 1 << 20
)

// tidy runs when a writer closes. It first lets Badger reclaim value-log
// files that are mostly stale. Files whose lists never change stay live for
// ever, so when too many remain it also rewrites the oldest lists: they live
// in the oldest files, which thereby go stale and are reclaimed by the GC of
// a later session. Unless urgent, it stops as soon as another process waits
// for the directory; either way its work is bounded.
func (s *Store) tidy(db *badger.DB, g *gate, urgent bool) {
	yield := func() bool { return !urgent && g.waiting(true) }
	deadline := time.Now().Add(tidyGCBudget)
	// A GC round rewrites the live part of one file, a rewrite one chunk;
	// on a volume without room for that, tidying waits for a later close.
	room := func(n int64) bool { _, _, ok := s.space(int(n)); return ok }
	for time.Now().Before(deadline) && !yield() && room(s.vlogFileSize()) {
		err := db.RunValueLogGC(gcDiscardRatio)
		if err != nil {
			if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
				s.opts.logger.Warn("value-log GC of the tag store", "dir", s.dir, "error", err)
			}
			break
		}
	}
	if valueLogFiles(s.dir) <= maxValueLogFiles {
		return
	}
	if err := rewriteOldest(db, func() bool { return yield() || !room(rewriteChunk) }); err != nil {
		s.opts.logger.Warn("rewriting old lists of the tag store", "dir", s.dir, "error", err)
	}
}

// listRef locates one stored list by the version that wrote it.
type listRef struct {
	key     []byte
	version uint64
	size    int64
}

// rewriteOldest writes the lists with the oldest versions again, unchanged,
// up to rewriteBudget bytes, unless yield says to stop. Nothing else uses
// the database meanwhile: tidy runs after the last call of the session and
// before the close.
func rewriteOldest(db *badger.DB, yield func() bool) error {
	var refs []listRef
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(tagsPrefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			refs = append(refs, listRef{item.KeyCopy(nil), item.Version(), item.ValueSize()})
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(refs, func(a, b listRef) int { return cmp.Compare(a.version, b.version) })
	for budget := int64(rewriteBudget); len(refs) > 0 && budget > 0; {
		if yield() {
			return nil
		}
		n, size := 0, int64(0)
		for n < len(refs) && size < rewriteChunk {
			size += refs[n].size
			n++
		}
		if err := rewriteLists(db, refs[:n]); err != nil {
			return err
		}
		refs, budget = refs[n:], budget-size
	}
	return nil
}

// rewriteLists writes the given lists again in one transaction.
func rewriteLists(db *badger.DB, refs []listRef) error {
	return db.Update(func(txn *badger.Txn) error {
		for _, r := range refs {
			item, err := txn.Get(r.key)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := txn.Set(r.key, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// valueLogFiles counts Badger's value-log files in dir.
func valueLogFiles(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".vlog") {
			n++
		}
	}
	return n
}
