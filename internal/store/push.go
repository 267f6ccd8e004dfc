package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/imagereflector/reflector/internal/metrics"
)

// Pushed is what Push did to an entry, and what the entry holds after it, without its list.
type Pushed struct {
	// From is the revision the tags were added to, Revision the entry's revision after them:
	// RevisionAfter(From, Tags). They are equal when no tag was new.
	From, Revision string
	// Tags are the pushed tags that the entry did not hold, in the order given.
	Tags []string
	// Count is how many tags the entry holds, and Latest its greatest ones, at most TailTags,
	// ascending.
	Count  int
	Latest []string
	// ScanTime is when the list was last written by Put, and Identity what it was listed for.
	ScanTime time.Time
	Identity Identity
}

// Missing returns the tags of tags, in their order and without duplicates, that the entry of
// key, listed for id, does not hold, and the entry's revision; tags outside the grammar are left
// out. Like Get, it answers ErrNotFound (ErrOtherIdentity) when there is no such entry. It reads
// the entry's header, its base list's stored bytes, which it searches without decoding or
// hashing them, and a marker record per tag: Badger's checksum of the stored bytes is the only
// part of its cost that grows with the list, at the speed of memory (some 0.1 ms for 100,000
// tags).
func (s *Store) Missing(ctx context.Context, key string, id Identity, tags []string) (missing []string, rev string, err error) {
	err = s.txn(ctx, key, false, func(txn *badger.Txn) error {
		m, err := readMetaOf(txn, key, id)
		if err != nil {
			return err
		}
		rev = m.Revision
		missing, err = missingTags(txn, key, m, tags)
		return err
	})
	return missing, rev, err
}

// Push adds tags to the entry of key, listed for id, as a push event does: the tags it lacks go
// into a delta record next to the entry's base list, with the header that records the new
// revision (RevisionAfter), and what the caller needs about the entry after it comes from its
// header. Neither reading nor writing grows with the entry's list, except once for an entry whose
// header predates the index that makes this possible (meta.Indexed): its base is rebuilt. A key
// without an entry is ErrNotFound, and one listed for another identity than id is
// ErrOtherIdentity: a partial list must never stand in for a full listing, so the first write
// for an identity is Put's.
//
// missingAt is the revision at which Missing returned tags, or empty: while the entry still has
// it, the tags are known to be missing and are not looked up again.
func (s *Store) Push(ctx context.Context, key string, id Identity, tags []string, missingAt string) (p Pushed, err error) {
	if !id.complete() {
		return Pushed{}, s.keyError(key, ErrIncompleteIdentity)
	}
	written, due := 0, false
	err = s.txn(ctx, key, true, func(txn *badger.Txn) error {
		written, due = 0, false
		m, err := readMetaOf(txn, key, id)
		if err != nil {
			return err
		}
		gen := m.Gen
		if !m.Indexed {
			e, err := readTags(txn, key, m)
			if err != nil {
				return err
			}
			value, hash := encodeTags(e.Tags)
			if m, written, err = s.writeBase(txn, key, m, encodedList{tags: e.Tags, value: value, hash: hash}, true); err != nil {
				return err
			}
		}
		// A base written over deltas leaves them for the sweep.
		due = m.Gen != gen
		var added []string
		if missingAt != "" && missingAt == m.Revision {
			added = validTags(tags)
		} else if added, err = missingTags(txn, key, m, tags); err != nil {
			return err
		}
		p = Pushed{From: m.Revision, Revision: m.Revision, Tags: added, Count: m.Count, Latest: m.Tail,
			ScanTime: m.ScanTime, Identity: m.Identity}
		if len(added) == 0 {
			return nil
		}
		next, n, err := s.addDelta(txn, key, m, added, nil)
		if err != nil {
			return err
		}
		p.Revision, p.Count, p.Latest = next.Revision, next.Count, next.Tail
		written += n
		due = due || next.compactionDue() || next.Gen != gen
		return nil
	})
	if err != nil {
		return Pushed{}, err
	}
	s.count(written, metrics.StoreWritePush)
	if due {
		s.compactSoon(key)
	}
	return p, nil
}

// missingTags returns the valid tags of tags, in their order and without duplicates, that the
// entry of key with header m does not hold. An indexed entry is searched in its base's stored
// bytes and its delta markers; any other is read whole.
func missingTags(txn *badger.Txn, key string, m meta, tags []string) ([]string, error) {
	want := validTags(tags)
	if len(want) == 0 {
		return nil, nil
	}
	if !m.Indexed {
		e, err := readTags(txn, key, m)
		if err != nil {
			return nil, err
		}
		_, added := mergeTags(e.Tags, want)
		return added, nil
	}
	item, err := txn.Get(tagsKey(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: metadata without tags", ErrCorrupt)
	}
	if err != nil {
		return nil, readError(err)
	}
	var out []string
	// Badger checks the value's checksum as it reads it: damage is an error here too, though the
	// list's hash, which only a full read checks, is not computed.
	err = item.Value(func(b []byte) error {
		if len(b) != m.BaseBytes {
			return fmt.Errorf("%w: tags of %d bytes, metadata says %d", ErrCorrupt, len(b), m.BaseBytes)
		}
		for _, t := range want {
			held, err := searchBase(b, t)
			if err != nil {
				return fmt.Errorf("%w: tags: %v", ErrCorrupt, err)
			}
			if !held {
				out = append(out, t)
			}
		}
		return nil
	})
	if err != nil {
		return nil, readError(err)
	}
	if m.Deltas == 0 {
		return out, nil
	}
	return slices.DeleteFunc(out, func(t string) bool {
		if err != nil {
			return false
		}
		_, e := txn.Get(markerKey(key, m.Gen, t))
		if e == nil {
			return true
		}
		if !errors.Is(e, badger.ErrKeyNotFound) {
			err = readError(e)
		}
		return false
	}), err
}

// validTags returns the tags of tags in the grammar, in their order, without duplicates.
func validTags(tags []string) []string {
	var out []string
	for _, t := range tags {
		if !invalidTag(t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// searchBase tells whether the stored list b, a compact JSON array of sorted tags in the grammar
// (which an indexed entry's base is: such tags need no escapes), holds tag, by a binary search of
// its bytes: an element is found between the separators `","`, which no tag holds.
func searchBase(b []byte, tag string) (bool, error) {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return false, errors.New("not a list")
	}
	body := b[1 : len(b)-1]
	sep := []byte(`","`)
	for len(body) > 0 {
		mid := len(body) / 2
		start := 0
		if i := bytes.LastIndex(body[:mid], sep); i >= 0 {
			start = i + 2
		}
		if body[start] != '"' {
			return false, errors.New("not a list of plain strings")
		}
		end := bytes.IndexByte(body[start+1:], '"')
		if end < 0 {
			return false, errors.New("unterminated string")
		}
		end += start + 1
		elem := body[start+1 : end]
		if bytes.IndexByte(elem, '\\') >= 0 {
			return false, errors.New("a string with escapes")
		}
		switch c := bytes.Compare(elem, []byte(tag)); {
		case c == 0:
			return true, nil
		case c < 0:
			if end+1 < len(body) && body[end+1] != ',' {
				return false, errors.New("not a list of plain strings")
			}
			body = body[min(end+2, len(body)):]
		default:
			body = body[:max(start-1, 0)]
		}
	}
	return false, nil
}
