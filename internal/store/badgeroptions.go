package store

import (
	"github.com/dgraph-io/badger/v4"
	badgeropts "github.com/dgraph-io/badger/v4/options"
)

// badgerOptions returns the Badger options for a directory. They are chosen
// for a process that opens the store briefly and often, holding little
// data; docs/store.md records what each one saves.
func (s *Store) badgerOptions(readOnly bool) badger.Options {
	return badger.DefaultOptions(s.dir).
		WithReadOnly(readOnly).
		WithLogger(badgerLogger{s.opts.logger}).
		WithMetricsEnabled(false).
		// Tag lists above 1 KiB go to the value log, so the LSM tree holds
		// keys, metadata and pointers only: flushing and compacting it, which
		// every read-write session does on close, stays small and fast.
		// Lists kept in the LSM tree instead made compaction dominate memory
		// (about 140 MiB peak RSS writing 1,000 lists of 1,000 tags).
		WithValueThreshold(1 << 10).
		// The memtable arena is allocated and zeroed whole at every open;
		// 64 MiB by default. Holding pointers, 2 MiB fits thousands of writes.
		WithMemTableSize(2 << 20).
		WithNumMemtables(2).
		// Value-log files are preallocated and mmapped whole; 1 GiB by
		// default. Small files also let GC reclaim space in small steps.
		WithValueLogFileSize(16 << 20).
		// Caches are cold after every open, so they cost memory for nothing.
		// Badger panics on a zero block cache while compression is on.
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithCompression(badgeropts.None).
		WithNumCompactors(2).
		// Each read-write session flushes one small L0 table on close;
		// compacting it then keeps reads fast and the discard statistics,
		// which value-log GC relies on, current.
		WithCompactL0OnClose(true)
}
