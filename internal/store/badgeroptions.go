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
		// Badger's default table size (2 MiB). Every read-write session builds
		// two tables, the flush of its memtable and the compaction of L0 on
		// close, each in a buffer of twice this size; 256 KiB tables cut that
		// garbage from 14.1 to 10.4 MB a push, but a store grown by thousands
		// of writes, reopened again and again, then took some 15% longer
		// (docs/store.md), a cost that grows with the store.
		WithBaseTableSize(2 << 20).
		// Value-log files are mapped whole, at twice this size; 1 GiB by
		// default. Small files let GC reclaim space in small steps, each of
		// which needs room for the live part of one file; see vlogFileSize.
		WithValueLogFileSize(s.vlogFileSize()).
		// Caches are cold after every open, so they cost memory for nothing.
		// Badger panics on a zero block cache while compression is on.
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithCompression(badgeropts.None).
		WithNumCompactors(2).
		// Each read-write session flushes one small L0 table on close;
		// compacting it then keeps reads fast and the discard statistics,
		// which value-log GC relies on, current.
		WithCompactL0OnClose(true).
		// Every table is checked when the directory opens, by readers and
		// writers alike: a damaged one fails the open, which a writer then
		// rebuilds (see rebuild) and a reader reports. Checked only as blocks
		// are read (OnBlockRead), a damaged block is passed over as a key
		// Badger does not have, and a reader took a repository whose tags
		// were damaged for one never scanned. The tables hold keys, metadata
		// and value pointers only, so this costs little (docs/store.md).
		// Not OnTableAndBlockRead: when a block fails the check at open in
		// that mode, Badger (v4.9) derefs the block it did not return and the
		// process dies in one of its goroutines; OnTableRead reads blocks
		// unchecked at open and checks each itself.
		WithChecksumVerificationMode(badgeropts.OnTableRead).
		// A damaged value is then a checksum error. Without it Badger decodes
		// the damaged header and, when the lengths do not fit, returns an
		// error that leaves the file's read lock held, after which Close
		// waits for ever.
		WithVerifyValueChecksum(true)
}

// Value-log file sizes: a value, hence a tag list, must fit in one file.
const (
	maxVlogFileSize = 16 << 20
	minVlogFileSize = 8 << 20
)

// vlogFileSize sizes value-log files for the volume: 1/32 of it, between
// 8 MiB (lists of some 400k short tags) and 16 MiB, so that a GC step, which
// needs room for the live part of one file, fits on a small volume.
func (s *Store) vlogFileSize() int64 {
	v := volumeBytes(s.dir) / 32 &^ (1<<20 - 1)
	return min(max(v, minVlogFileSize), maxVlogFileSize)
}
