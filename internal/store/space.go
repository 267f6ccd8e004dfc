package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/imagereflector/reflector/internal/metrics"
)

// Badger maps its value log, its memtables' logs, its tables and its discard
// statistics into memory and writes them through the mapping. The files are
// created sparse, so the filesystem allocates their blocks only as pages are
// first written, and on a full filesystem that write faults: SIGBUS, which
// kills the process. Badger cannot report it, so the store keeps it from
// happening: a writer opens the directory, and writes, only while the volume
// has room for what the session may still write without being asked, the
// reserve, plus what the write itself adds.
const (
	// baseReserve covers what a read-write session writes through mappings
	// besides the values it is given: both memtables' logs and the tables a
	// flush makes of them (2 MiB each), the discard statistics (1 MiB), and
	// the headers of the files an open creates.
	baseReserve = 2*2*(2<<20) + 2<<20
	// entryOverhead bounds what a write adds beyond its values: keys, value
	// pointers and headers in the memtable log and the value log.
	entryOverhead = 4 << 10
)

// room returns ErrFull unless the volume has room for a write of n bytes
// of values on top of the reserve; n is 0 for an open. Only a writer calls
// it.
func (s *Store) room(n int) error {
	free, need, ok := s.space(n)
	if ok {
		return nil
	}
	metrics.RecordStoreFull()
	return fmt.Errorf("tag store %s: %w: %s free on its volume, a write needs %s", s.dir, ErrFull, mib(free), mib(need))
}

// space reports whether the volume has room for a write of n bytes on top of
// the reserve, with what it has and what is needed. When short, it first
// gives up the aside copy of a damaged store.
func (s *Store) space(n int) (free, need int64, ok bool) {
	need = s.reserve() + int64(n) + entryOverhead
	free, err := freeBytes(s.dir)
	if err != nil {
		// A volume that statfs cannot answer for is not known to be full;
		// the write will report what is wrong with it.
		return 0, need, true
	}
	if free < need && s.dropAside() {
		if free, err = freeBytes(s.dir); err != nil {
			return 0, need, true
		}
	}
	return free, need, free >= need
}

// reserve is baseReserve plus the size of the tables: closing a session
// compacts them, writing new tables before the old ones go.
func (s *Store) reserve() int64 {
	r := int64(baseReserve)
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return r
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sst") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			r += fi.Size()
		}
	}
	return r
}

// freeBytes returns the bytes an unprivileged writer may still allocate on
// the filesystem of dir.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// volumeBytes returns the size of the filesystem of dir, or 0 when unknown.
func volumeBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Clean(dir), &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

// mib formats a byte count for a message.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
