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
	// Marshalling a []string cannot fail.
	b, _ := json.Marshal(sorted)
	return b, revisionOfValue(b)
}

// revisionOfValue hashes a stored tags value.
func revisionOfValue(b []byte) string {
	sum := sha256.Sum256(b)
	return revisionPrefix + hex.EncodeToString(sum[:])
}
