package store

import (
	"context"
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// Delete removes the entry of key, as when its ImageRepository is deleted, and reports whether
// there was one. Deleting a missing entry is not an error.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	existed := false
	err := s.txn(ctx, key, true, func(txn *badger.Txn) error {
		existed = false
		for _, k := range [][]byte{metaKey(key), tagsKey(key)} {
			_, err := txn.Get(k)
			if err == nil {
				existed = true
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
		}
		if !existed {
			return nil
		}
		if err := s.room(0); err != nil {
			return err
		}
		return deleteEntry(txn, key)
	})
	if existed && err == nil {
		s.compactSoon(key)
	}
	return existed && err == nil, err
}

// DeleteFor removes the entry of key if it was listed for the object of
// uid, as when that ImageRepository is being deleted, and reports whether it
// did. An entry of another object (a successor of the same name that was
// already scanned) or of none stays; an unreadable one goes. The check and the deletion are one
// transaction.
func (s *Store) DeleteFor(ctx context.Context, key, uid string) (bool, error) {
	if uid == "" {
		return false, s.keyError(key, ErrIncompleteIdentity)
	}
	deleted := false
	err := s.txn(ctx, key, true, func(txn *badger.Txn) error {
		deleted = false
		m, err := readMeta(txn, key)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case errors.Is(err, ErrCorrupt):
			// Nobody can use it, and keeping it would keep the object from being deleted.
		case err != nil:
			return err
		case !m.Identity.complete() || m.Identity.UID != uid:
			return nil
		}
		if err := s.room(0); err != nil {
			return err
		}
		deleted = true
		return deleteEntry(txn, key)
	})
	if deleted && err == nil {
		s.compactSoon(key)
	}
	return deleted, err
}

// deleteEntry deletes the header and the base list of key; its deltas are left to sweepDeltas
// (compactSoon), which the caller starts once this commits.
func deleteEntry(txn *badger.Txn, key string) error {
	if err := txn.Delete(metaKey(key)); err != nil {
		return err
	}
	return txn.Delete(tagsKey(key))
}
