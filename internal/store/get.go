package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Get returns the entry stored for key ("namespace/name") if it was listed
// for id, or an error wrapping ErrNotFound when there is none (wrapping
// ErrOtherIdentity too when there is one listed for another identity).
func (s *Store) Get(ctx context.Context, key string, id Identity) (e Entry, err error) {
	err = s.txn(ctx, key, false, func(txn *badger.Txn) error {
		e, err = readEntry(txn, key, id)
		return err
	})
	return e, err
}

// Revision returns the revision stored for key without reading its tags, if
// it was listed for id, or an error wrapping ErrNotFound as Get does.
func (s *Store) Revision(ctx context.Context, key string, id Identity) (string, error) {
	var m meta
	err := s.txn(ctx, key, false, func(txn *badger.Txn) (err error) {
		m, err = readMetaOf(txn, key, id)
		return err
	})
	return m.Revision, err
}

// Keys returns the keys of all entries, sorted. The cron reconciler deletes
// those whose ImageRepository no longer exists.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	db, err := s.acquire(ctx, false)
	if err != nil {
		return nil, err
	}
	defer s.release()
	keys := []string{}
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(metaPrefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, strings.TrimPrefix(string(it.Item().Key()), metaPrefix))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tag store %s: listing keys: %w", s.dir, err)
	}
	return keys, nil
}

// readMeta reads the metadata of key; a missing key is ErrNotFound.
func readMeta(txn *badger.Txn, key string) (meta, error) {
	item, err := txn.Get(metaKey(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		if r, ok := readRebuilt(txn); ok {
			return meta{}, fmt.Errorf("%w: %w at %s after: %s", ErrNotFound, ErrRebuilt, r.At.Format(time.RFC3339), r.Cause)
		}
		return meta{}, ErrNotFound
	}
	if err != nil {
		return meta{}, readError(err)
	}
	var m meta
	err = item.Value(func(b []byte) error {
		m, err = decodeMeta(b)
		if err != nil {
			return fmt.Errorf("%w: metadata: %v", ErrCorrupt, err)
		}
		return nil
	})
	return m, readError(err)
}

// readMetaOf reads the metadata of key if it was listed for id; an entry of
// another identity is ErrOtherIdentity.
func readMetaOf(txn *badger.Txn, key string, id Identity) (meta, error) {
	m, err := readMeta(txn, key)
	if err != nil {
		return meta{}, err
	}
	if !m.Identity.matches(id) {
		return meta{}, ErrOtherIdentity
	}
	return m, nil
}

// readEntry reads the whole entry of key, if it was listed for id, within
// one transaction, so that metadata and tags belong to the same write.
func readEntry(txn *badger.Txn, key string, id Identity) (Entry, error) {
	m, err := readMetaOf(txn, key, id)
	if err != nil {
		return Entry{}, err
	}
	return readTags(txn, key, m)
}

// readTags reads the tags of the entry of key whose header is m: its base list merged with its
// deltas, each checked against the hashes the header records.
func readTags(txn *badger.Txn, key string, m meta) (Entry, error) {
	item, err := txn.Get(tagsKey(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("%w: metadata without tags", ErrCorrupt)
	}
	if err != nil {
		return Entry{}, readError(err)
	}
	var tags []string
	err = item.Value(func(b []byte) error {
		tags, err = decodeTags(b, m.baseHash())
		if err != nil {
			return fmt.Errorf("%w: tags: %v", ErrCorrupt, err)
		}
		return nil
	})
	if err != nil {
		return Entry{}, readError(err)
	}
	// An entry written before the store left tags outside the grammar out keeps its revision,
	// which the returned list is a function of.
	tags = keepValid(tags)
	if m.Deltas > 0 {
		added, err := readDeltas(txn, key, m)
		if err != nil {
			return Entry{}, err
		}
		tags = union(tags, normalize(added))
	}
	return Entry{Tags: tags, Revision: m.Revision, ScanTime: m.ScanTime, Identity: m.Identity}, nil
}

// readError reports a value that Badger could not read (a checksum that does
// not match, a value pointer out of its file) as damage: nothing else makes
// a read within a transaction fail.
func readError(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrCorrupt, err)
}

// txn runs fn in one transaction on the open database, read-write when
// write, again when a concurrent call of this process committed a
// conflicting one first. Its error names the store and key.
func (s *Store) txn(ctx context.Context, key string, write bool, fn func(*badger.Txn) error) error {
	if err := checkKey(key); err != nil {
		return err
	}
	db, err := s.acquire(ctx, write)
	if err != nil {
		return err
	}
	defer s.release()
	for {
		if write {
			err = db.Update(fn)
			if err == nil {
				s.flushSoon()
			}
		} else {
			err = db.View(fn)
		}
		if !errors.Is(err, badger.ErrConflict) || ctx.Err() != nil {
			return s.keyError(key, err)
		}
	}
}

// keyError names the store and key in an error.
func (s *Store) keyError(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("tag store %s: %s: %w", s.dir, key, err)
}
