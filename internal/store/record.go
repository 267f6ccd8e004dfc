package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/imagereflector/reflector/internal/imagename"
)

// Entry is what the store holds for one ImageRepository.
type Entry struct {
	// Tags is sorted and holds no duplicates.
	Tags []string
	// Revision identifies the tag list; see RevisionOf.
	Revision string
	// ScanTime is when the list was last written by Put.
	ScanTime time.Time
	// Identity is what the list was listed for.
	Identity Identity
}

// Identity is what a tag list was listed for. An entry answers only a caller
// that asks with the same identity, so that a list never serves an object it
// was not listed for: a recreated ImageRepository of the same name, an edited
// spec.image or exclusion list whose next scan has not succeeded yet.
type Identity struct {
	// UID is the ImageRepository's metadata.uid.
	UID string `json:"uid"`
	// Image is the canonical name of the image listed.
	Image string `json:"image"`
	// Listing identifies the rest of the spec that decides which tags are
	// listed and kept, such as the exclusion list; its form is the caller's.
	Listing string `json:"listing,omitempty"`
}

// complete tells whether id says what it is about; an entry is never
// written, nor matched, without UID and image.
func (id Identity) complete() bool {
	return id.UID != "" && id.Image != ""
}

// matches tells whether an entry stored under id answers a caller asking
// with want. Entries written before identities were recorded have none and
// match nothing, which costs one full scan.
func (id Identity) matches(want Identity) bool {
	return id.complete() && id == want
}

// Key prefixes. Keeping the small metadata apart from the tags lets
// Revision and Keys answer, and a push check the identity and add a delta,
// without reading a list of 100k tags.
const (
	metaPrefix  = "meta/"
	tagsPrefix  = "tags/"
	deltaPrefix = "delta/"
)

// meta is the stored value under metaPrefix, the entry's header. The fields
// after Identity came with deltas; an entry written before has none of them,
// which reads as a base of its revision without deltas, its exact state.
type meta struct {
	Revision string    `json:"revision"`
	ScanTime time.Time `json:"scanTime"`
	Identity Identity  `json:"identity"`
	// Base is the revision of the list under tagsPrefix, from which the
	// deltas chain to Revision (RevisionAfter); empty when it is Revision.
	Base string `json:"base,omitempty"`
	// BaseHash is the hash of the value under tagsPrefix (revisionOfValue)
	// when it is not Base: a compaction, or a Put of the list an entry
	// already holds, writes the list again without moving the revision.
	BaseHash string `json:"baseHash,omitempty"`
	// BaseBytes is the size of the value under tagsPrefix; 0 when unknown.
	BaseBytes int `json:"baseBytes,omitempty"`
	// Deltas counts the delta records, numbered from 1, and DeltaBytes
	// their values' bytes.
	Deltas     int `json:"deltas,omitempty"`
	DeltaBytes int `json:"deltaBytes,omitempty"`
	// Gen names the deltas of this base: their records are under
	// genKey(key, Gen), and those under any other generation are left over
	// from an earlier base, for sweepDeltas. Empty in a header written
	// before generations, whose deltas are right under deltasKey.
	Gen string `json:"gen,omitempty"`
	// Indexed tells that Count and Tail are recorded and that every tag of
	// every delta has a marker record (markerKey): a push then finds which
	// of its tags are new, and what the status shows, without reading the
	// whole list. A header written before them, or by a process that did
	// not know them, lacks it; the next push rebuilds the base once.
	Indexed bool `json:"indexed,omitempty"`
	// Count is how many tags the entry holds, base and deltas merged.
	Count int `json:"count,omitempty"`
	// Tail holds the greatest tags of the entry, at most TailTags,
	// ascending: the status's latestTags.
	Tail []string `json:"tail,omitempty"`
}

// TailTags is how many of an entry's greatest tags its header records
// (Pushed.Latest): as many as an ImageRepository's status shows.
const TailTags = 10

// tailOf returns the last TailTags tags of a sorted list, as a copy.
func tailOf(sorted []string) []string {
	return slices.Clone(sorted[max(0, len(sorted)-TailTags):])
}

// setIndex records in m the count and tail of tags, the sorted list it
// holds once its deltas are merged, and that it has no delta without
// markers.
func (m *meta) setIndex(tags []string) {
	m.Indexed, m.Count, m.Tail = true, len(tags), tailOf(tags)
}

// base is the revision the deltas start from.
func (m meta) base() string {
	if m.Base == "" {
		return m.Revision
	}
	return m.Base
}

// baseHash is what the value under tagsPrefix hashes to.
func (m meta) baseHash() string {
	if m.BaseHash == "" {
		return m.base()
	}
	return m.BaseHash
}

func metaKey(key string) []byte { return []byte(metaPrefix + key) }
func tagsKey(key string) []byte { return []byte(tagsPrefix + key) }

// deltasKey prefixes the delta records of key; a key's name holds no slash,
// so no other key's records share it.
func deltasKey(key string) []byte { return []byte(deltaPrefix + key + "/") }

// genKey prefixes the delta records and markers of generation gen of key.
func genKey(key, gen string) []byte {
	if gen == "" {
		return deltasKey(key)
	}
	return append(deltasKey(key), "g"+gen+"/"...)
}

// ofGen tells whether k, a key under deltasKey(key), belongs to generation gen: the records of
// the generation without a name are numbers right under deltasKey.
func ofGen(k []byte, key, gen string) bool {
	rest := k[len(deltasKey(key)):]
	if gen == "" {
		return len(rest) > 0 && rest[0] >= '0' && rest[0] <= '9'
	}
	return bytes.HasPrefix(rest, []byte("g"+gen+"/"))
}

// newGen returns a generation name that no earlier base of any key had.
func newGen() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// deltaKey is the key of delta record n of generation gen of key: fixed width, so that the
// records sort in their order.
func deltaKey(key, gen string, n int) []byte {
	return fmt.Appendf(genKey(key, gen), "%08d", n)
}

// markerKey is the record that tells that a delta of generation gen of key added tag. It sorts
// after the delta records (a letter after the digits).
func markerKey(key, gen, tag string) []byte {
	return append(genKey(key, gen), "t/"+tag...)
}

// checkKey accepts the identity of a namespaced Kubernetes object.
func checkKey(key string) error {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	return nil
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return meta{}, err
	}
	return m, nil
}

func encodeMeta(m meta) []byte {
	// The defaults are left out, so that an entry without deltas is written
	// as the format before them wrote it.
	if m.Base == m.Revision {
		m.Base = ""
	}
	if m.BaseHash == m.base() {
		m.BaseHash = ""
	}
	// Marshalling strings, numbers and a time cannot fail.
	b, _ := json.Marshal(m)
	return b
}

// decodeTags checks a stored tags value against its hash before decoding
// it, so that a damaged value is reported rather than used.
func decodeTags(b []byte, hash string) ([]string, error) {
	if got := revisionOfValue(b); got != hash {
		return nil, fmt.Errorf("tags hash to %s, metadata says %s", got, hash)
	}
	return parseTags(b)
}

// parseTags decodes a stored list.
func parseTags(b []byte) ([]string, error) {
	if tags, ok := splitTags(b); ok {
		return tags, nil
	}
	var tags []string
	if err := json.Unmarshal(b, &tags); err != nil {
		return nil, err
	}
	return tags, nil
}

// invalidTag reports a tag outside the distribution spec's grammar.
func invalidTag(tag string) bool { return !imagename.ValidTag(tag) }

// keepValid removes from tags, in place, the tags outside the distribution
// spec's grammar (imagename.ValidTag). Scans leave them out, but an entry
// written before they did may hold them, and what a policy selects ends up
// in Git: the store neither writes nor returns them. Such a tag cannot be
// pulled by name from any registry (they refuse it on push), so nothing that
// exists is lost. It allocates nothing when every tag is valid, the usual
// case.
func keepValid(tags []string) []string {
	if !slices.ContainsFunc(tags, invalidTag) {
		return tags
	}
	return slices.DeleteFunc(tags, invalidTag)
}

// splitTags decodes the common form of a stored list, a compact JSON array
// of strings without escapes, by slicing one string: encoding/json would
// allocate each of 100k tags separately and take ten times as long. It
// reports false for anything else.
func splitTags(b []byte) ([]string, bool) {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' || bytes.IndexByte(b, '\\') >= 0 {
		return nil, false
	}
	rest := string(b[1 : len(b)-1])
	tags := make([]string, 0, strings.Count(rest, ",")+1)
	for rest != "" {
		if rest[0] != '"' {
			return nil, false
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			return nil, false
		}
		tags = append(tags, rest[1:1+end])
		rest = rest[end+2:]
		if rest == "" {
			break
		}
		if rest[0] != ',' || len(rest) == 1 {
			return nil, false
		}
		rest = rest[1:]
	}
	return tags, true
}
