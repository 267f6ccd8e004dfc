package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/fb"
	badgeropts "github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/badger/v4/y"
	"google.golang.org/protobuf/proto"
)

// checkTables reads every table that the directory's MANIFEST names and checks it as Badger
// will read it, before Badger opens it. Badger (v4.9) checks a table's footer, and with
// OnTableRead its blocks, but reads the lengths it finds there without bounds: a table whose
// footer or block trailer is damaged makes it slice out of range, or dereference the block it
// failed to read, in a goroutine of its own, and the process dies at every open before the
// damage can be reported or the directory set aside. So a damaged table fails here, as damage,
// instead.
//
// It checks only while no other process holds the directory (Badger's lock on it, taken here
// as Badger will take it and released before Badger's open), so that no table changes under
// it, and it leaves to Badger's open what it cannot judge: a MANIFEST that does not replay, a
// table file that is missing, one that is compressed or encrypted, a directory that another
// process holds (the open then fails on the lock and is retried).
func (s *Store) checkTables(readOnly bool) error {
	d, err := os.Open(s.dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	how := syscall.LOCK_EX
	if readOnly {
		how = syscall.LOCK_SH
	}
	if syscall.Flock(int(d.Fd()), how|syscall.LOCK_NB) != nil {
		return nil
	}
	defer func() { _ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN) }()

	mf, err := os.Open(filepath.Join(s.dir, badger.ManifestFilename))
	if err != nil {
		return nil
	}
	defer mf.Close()
	opts := s.badgerOptions(readOnly)
	m, _, err := badger.ReplayManifestFile(mf, opts.ExternalMagicVersion, opts)
	if err != nil {
		return nil
	}
	for id, t := range m.Tables {
		if t.Compression != badgeropts.None || t.KeyID != 0 {
			continue
		}
		name := table.NewFilename(id, s.dir)
		b, err := os.ReadFile(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := checkTable(b); err != nil {
			return fmt.Errorf("table %s: %w", filepath.Base(name), err)
		}
	}
	return nil
}

// errTable is wrapped by every finding of checkTable.
var errTable = errors.New("damaged table")

// checkTable checks an uncompressed, unencrypted table file as Badger's builder writes it:
// blocks, the index (a flatbuffer), its length, its checksum and the checksum's length; each
// block ends in its entry offsets, their count, its checksum and the checksum's length. Every
// length is checked against what holds it, and every checksum verified, so that Badger's reads
// of the same bytes stay in bounds.
func checkTable(b []byte) (err error) {
	index, rest, err := tail(b, "table")
	if err != nil {
		return err
	}
	if len(rest) < 4 {
		return fmt.Errorf("%w: no index length", errTable)
	}
	indexLen := int(binary.BigEndian.Uint32(rest[len(rest)-4:]))
	rest = rest[:len(rest)-4]
	if indexLen > len(rest) {
		return fmt.Errorf("%w: index of %d bytes in %d", errTable, indexLen, len(rest))
	}
	data := rest[len(rest)-indexLen:]
	if err := verify(data, index); err != nil {
		return fmt.Errorf("%w: index: %w", errTable, err)
	}
	blocks := rest[:len(rest)-indexLen]
	// The flatbuffer accessors panic on offsets out of range. The index passed its checksum,
	// so only a damage that keeps the checksum right gets here: damage all the same.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: index does not decode: %v", errTable, r)
		}
	}()
	idx := fb.GetRootAsTableIndex(data, 0)
	var ko fb.BlockOffset
	for i := range idx.OffsetsLength() {
		if !idx.Offsets(&ko, i) {
			return fmt.Errorf("%w: block %d has no offset", errTable, i)
		}
		off, n := int(ko.Offset()), int(ko.Len())
		if off > len(blocks) || n > len(blocks)-off {
			return fmt.Errorf("%w: block %d at %d+%d beyond %d bytes of blocks", errTable, i, off, n, len(blocks))
		}
		if err := checkBlock(blocks[off : off+n]); err != nil {
			return fmt.Errorf("%w: block %d: %w", errTable, i, err)
		}
	}
	return nil
}

// checkBlock checks one block: its checksum, then the count of entries and their offsets that
// the checksummed part ends in.
func checkBlock(b []byte) error {
	sum, data, err := tail(b, "block")
	if err != nil {
		return err
	}
	if err := verify(data, sum); err != nil {
		return err
	}
	if len(data) < 4 {
		return errors.New("no entry count")
	}
	entries := int(binary.BigEndian.Uint32(data[len(data)-4:]))
	if entries > (len(data)-4)/4 {
		return fmt.Errorf("%d entries in %d bytes", entries, len(data))
	}
	return nil
}

// tail splits what ends in a checksum and its length into the decoded checksum and what comes
// before it.
func tail(b []byte, what string) (*pb.Checksum, []byte, error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: %s of %d bytes", errTable, what, len(b))
	}
	n := int(binary.BigEndian.Uint32(b[len(b)-4:]))
	b = b[:len(b)-4]
	if n > len(b) {
		return nil, nil, fmt.Errorf("%w: %s checksum of %d bytes in %d", errTable, what, n, len(b))
	}
	sum := &pb.Checksum{}
	if err := proto.Unmarshal(b[len(b)-n:], sum); err != nil {
		return nil, nil, fmt.Errorf("%w: %s checksum: %v", errTable, what, err)
	}
	return sum, b[:len(b)-n], nil
}

// verify checks data against its checksum, of an algorithm Badger knows.
func verify(data []byte, sum *pb.Checksum) error {
	if sum.Algo != pb.Checksum_CRC32C && sum.Algo != pb.Checksum_XXHash64 {
		return fmt.Errorf("checksum of unknown algorithm %d", sum.Algo)
	}
	return y.VerifyChecksum(data, sum)
}
