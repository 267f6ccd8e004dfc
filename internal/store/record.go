package store

import (
	"bytes"
	"encoding/json"
	"fmt"
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
// Revision and Keys answer without reading a list of 100k tags.
const (
	metaPrefix = "meta/"
	tagsPrefix = "tags/"
)

// meta is the stored value under metaPrefix.
type meta struct {
	Revision string    `json:"revision"`
	ScanTime time.Time `json:"scanTime"`
	Identity Identity  `json:"identity"`
}

func metaKey(key string) []byte { return []byte(metaPrefix + key) }
func tagsKey(key string) []byte { return []byte(tagsPrefix + key) }

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
	// Marshalling strings and a time cannot fail.
	b, _ := json.Marshal(m)
	return b
}

// decodeTags checks a stored tags value against its revision before
// decoding it, so that a damaged value is reported rather than used.
func decodeTags(b []byte, revision string) ([]string, error) {
	if got := revisionOfValue(b); got != revision {
		return nil, fmt.Errorf("tags hash to %s, metadata says %s", got, revision)
	}
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
