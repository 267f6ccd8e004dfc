package store

import (
	"context"

	"github.com/dgraph-io/badger/v4"
)

// Delete removes the entry of key, as when its ImageRepository is deleted.
// Deleting a missing entry is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	db, err := s.acquire(ctx, true)
	if err != nil {
		return err
	}
	defer s.release()
	err = update(ctx, db, func(txn *badger.Txn) error {
		if err := txn.Delete(metaKey(key)); err != nil {
			return err
		}
		return txn.Delete(tagsKey(key))
	})
	return s.keyError(key, err)
}
