package store

import "errors"

var (
	// ErrNotFound is returned when the store holds no entry for a key.
	ErrNotFound = errors.New("no entry in the tag store")

	// ErrLocked is returned when another process held the directory for the
	// whole time the caller's context allowed.
	ErrLocked = errors.New("tag store is held by another process")

	// ErrCorrupt is returned when the directory cannot be opened or a value
	// cannot be read for a reason other than a lock.
	ErrCorrupt = errors.New("tag store is unreadable")

	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("tag store is closed")

	// ErrReadOnly is returned by writes on a Store created with ReadOnly.
	ErrReadOnly = errors.New("tag store is opened read-only")

	// ErrInvalidKey is returned for a key that is not "namespace/name".
	ErrInvalidKey = errors.New("tag store key must be namespace/name")
)
