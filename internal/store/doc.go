// Package store is the tag store: one Badger directory, shared by the scan
// function (which writes) and the policy function (which reads), holding the
// tags of every ImageRepository under its identity "namespace/name".
//
// Badger lets one process hold a directory read-write or several hold it
// read-only, and fails an open at once when that is not possible. A Store
// therefore holds the directory only while it is used: the first call opens
// it, concurrent calls of the same process share it, and it is closed after a
// short idle linger or as soon as another process waits for it. A Store that
// finds the directory held by another process retries with backoff until the
// caller's context ends.
//
// Each entry is two Badger keys written in one transaction, so a reader sees
// either the old entry or the new one:
//
//	meta/<namespace>/<name>  {"revision":"sha256:…","scanTime":"…","identity":{…}}
//	tags/<namespace>/<name>  ["tag-a","tag-b",…] (sorted, without duplicates)
//
// The identity is what the tags were listed for ([Identity]: the object's
// UID, the canonical image, and what else decides the list). Reads and
// incremental adds name the identity they expect and treat an entry of
// another one, or of none, as missing ([ErrOtherIdentity]): the store may be
// stale or empty, but never answers an object with tags listed for another.
//
// The revision is "sha256:" followed by the lower-case hex SHA-256 of the
// stored tags value, that is of the compact JSON array of the sorted,
// de-duplicated tags; see [RevisionOf].
//
// The store is a cache: losing it costs a full scan. A writer that finds the
// directory damaged ([ErrCorrupt]) sets it aside and starts an empty store,
// which the next scans refill ([ErrRebuilt]); on a volume without room for
// what Badger may write, writes fail with [ErrFull] rather than fault.
package store
