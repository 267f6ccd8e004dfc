package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// revisionPrefix names the hash so that the format can change without
// being mistaken for the old one.
const revisionPrefix = "sha256:"

// RevisionOf returns the revision the store gives to a tag list: "sha256:"
// and the hex SHA-256 of the compact JSON array of the sorted, de-duplicated,
// valid tags. Order, duplicates and tags outside the distribution spec's
// grammar do not change it.
func RevisionOf(tags []string) string {
	_, rev := encodeTags(normalize(tags))
	return rev
}

// RevisionAfter returns the revision of a list of revision from once the
// tags added are added to it, as a push's delta does: "sha256:" and the hex
// SHA-256 of from, a newline and the compact JSON array of the added tags,
// sorted, de-duplicated and in the grammar. added must hold only tags the
// list of from lacks, as Pushed.Tags does; without any, the revision stays
// from. A reader that holds the list of from and the added tags thus holds
// the new revision too, without the whole list.
//
// A revision is a function of the list it names, but after additions no
// longer RevisionOf that list: it names the way there too. Revisions are
// only ever compared for equality; a Put of the list an entry holds keeps
// its revision.
func RevisionAfter(from string, added []string) string {
	sorted := normalize(added)
	if len(sorted) == 0 {
		return from
	}
	value, _ := encodeTags(sorted)
	return chainValue(from, value)
}

// chainValue is RevisionAfter for a stored delta value.
func chainValue(from string, value []byte) string {
	h := sha256.New()
	h.Write([]byte(from))
	h.Write([]byte{'\n'})
	h.Write(value)
	return revisionPrefix + hex.EncodeToString(h.Sum(nil))
}

// normalize returns a sorted copy of the valid tags of tags (keepValid)
// without duplicates; never nil, so that an empty list encodes as [] rather
// than null.
func normalize(tags []string) []string {
	out := keepValid(slices.Clone(tags))
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// encodeTags returns the stored form of a normalized list and its revision.
func encodeTags(sorted []string) ([]byte, string) {
	b, ok := appendPlain(sorted)
	if !ok {
		// Marshalling a []string cannot fail.
		b, _ = json.Marshal(sorted)
	}
	return b, revisionOfValue(b)
}

// appendPlain encodes a non-nil list of strings that JSON writes as they are (printable ASCII
// but for the quote, the backslash and the three characters encoding/json escapes for HTML),
// every valid tag among them, into exactly encoding/json's bytes, in one allocation and without
// reflection. It reports false for any other list.
func appendPlain(tags []string) ([]byte, bool) {
	if tags == nil {
		return nil, false
	}
	n := 2
	for _, t := range tags {
		if !plain(t) {
			return nil, false
		}
		n += len(t) + 3
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, t := range tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, t...)
		b = append(b, '"')
	}
	return append(b, ']'), true
}

// plain tells whether encoding/json writes s inside its quotes unchanged.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

// plainByte holds the bytes that encoding/json writes unchanged inside a string.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// revisionOfValue hashes a stored tags value.
func revisionOfValue(b []byte) string {
	sum := sha256.Sum256(b)
	return revisionPrefix + hex.EncodeToString(sum[:])
}
