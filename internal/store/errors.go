package store

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound is returned when the store holds no entry for a key.
	ErrNotFound = errors.New("no entry in the tag store")

	// ErrOtherIdentity is returned when the entry of a key was listed for
	// another identity than the caller's. It wraps ErrNotFound: for that
	// caller there are no tags yet.
	ErrOtherIdentity = fmt.Errorf("%w listed for this identity", ErrNotFound)

	// ErrIncompleteIdentity is returned by writes whose identity lacks the
	// UID or the image.
	ErrIncompleteIdentity = errors.New("tag store identity needs a UID and an image")

	// ErrLocked is returned when another process held the directory for the
	// whole time the caller's context allowed.
	ErrLocked = errors.New("tag store is held by another process")

	// ErrCorrupt is returned when the directory cannot be opened or a value
	// cannot be read because of what it holds: a damaged file. A writer that
	// finds the directory damaged sets it aside and starts an empty store
	// (ErrRebuilt); a damaged entry is replaced by the next Put.
	ErrCorrupt = errors.New("tag store is unreadable")

	// ErrRebuilt is wrapped, with ErrNotFound, by reads of a key that has no
	// entry in a store that replaced a damaged one: its tags were lost with
	// the damage, and the next full listing brings them back.
	ErrRebuilt = errors.New("tag store was rebuilt after damage")

	// ErrFull is returned by writes, and by a writer's open, while the
	// volume lacks the room Badger may need: Badger writes through memory
	// mappings, and a mapped write on a full filesystem kills the process.
	ErrFull = errors.New("tag store is full")

	// ErrUnavailable is returned when the directory cannot be opened because
	// of the volume or the process (permission, read-only or failing
	// filesystem, no file descriptors or memory left), not of its content.
	ErrUnavailable = errors.New("tag store cannot be opened")

	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("tag store is closed")

	// ErrReadOnly is returned by writes on a Store created with ReadOnly.
	ErrReadOnly = errors.New("tag store is opened read-only")

	// ErrInvalidKey is returned for a key that is not "namespace/name".
	ErrInvalidKey = errors.New("tag store key must be namespace/name")
)
