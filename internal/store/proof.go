package store

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// proofFile holds a random key in the store directory. Only the processes that mount the
// directory can read it, so a message signed with it (a scan's announcement of the tags it added)
// comes from one of them, whoever relayed it.
const proofFile = "reflector.key"

// proofKeyBytes is the key's length: an HMAC-SHA256 key of the hash's size.
const proofKeyBytes = 32

// ProofKey returns the store directory's key, creating it when there is none. With fresh it
// reads the file again instead of the key read before, for a signature that did not verify: the
// directory may have been replaced since.
func (s *Store) ProofKey(fresh bool) ([]byte, error) {
	s.mu.Lock()
	key := s.proofKey
	s.mu.Unlock()
	if key != nil && !fresh {
		return key, nil
	}
	key, err := readOrCreateKey(s.dir)
	if err != nil {
		return nil, fmt.Errorf("tag store %s: proof key: %w", s.dir, err)
	}
	s.mu.Lock()
	s.proofKey = key
	s.mu.Unlock()
	return key, nil
}

// readOrCreateKey reads dir's key file, or writes a new one. Two processes creating it at once
// agree: each writes its own key to a temporary file and links it to the final name, which only
// the first link gets; the other reads the winner's.
func readOrCreateKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, proofFile)
	if key, err := readKey(path); !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	key := make([]byte, proofKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, proofFile+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o640); err != nil {
		tmp.Close()
		return nil, err
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return readKey(path)
}

// readKey reads a key file and refuses one of the wrong length, which no process wrote whole.
func readKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(key) != proofKeyBytes {
		return nil, fmt.Errorf("%s holds %d bytes, not a key of %d", path, len(key), proofKeyBytes)
	}
	return key, nil
}
