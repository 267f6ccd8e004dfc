package store

import (
	"log/slog"
	"time"
)

// DefaultLinger is how long an idle Store keeps the directory open when no
// other process is waiting for it.
const DefaultLinger = 200 * time.Millisecond

// Option configures a Store.
type Option func(*options)

type options struct {
	readOnly bool
	handOver bool
	linger   time.Duration
	logger   *slog.Logger
	// afterClose runs after each close of the directory.
	afterClose func()
}

func makeOptions(opts []Option) options {
	o := options{linger: DefaultLinger, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// ReadOnly makes the Store a reader: it opens the directory read-only, so
// several reading processes can hold it at once, and rejects writes.
func ReadOnly() Option {
	return func(o *options) { o.readOnly = true }
}

// HandOverListings makes a Put that changed an entry give the directory up
// as soon as the calls in flight end, without the linger: for a writer whose
// new listings a reader in another process reads next, which then finds the
// directory free instead of ringing the gate and waiting for the close. The
// scan function's store is such a writer: the announcement of a listing
// carries no delta, so the policy function reads the store. Pushes keep the
// linger, for the next push's scan.
func HandOverListings() Option {
	return func(o *options) { o.handOver = true }
}

// WithLinger sets how long the directory stays open after the last call
// ends, so that a burst of calls opens it once. A waiting process cuts the
// linger short.
func WithLinger(d time.Duration) Option {
	return func(o *options) { o.linger = max(d, 0) }
}

// AfterClose has f run after each close of the directory, off the calls'
// path: the garbage of the session that ended (the memtable's arena and the
// buffers of the tables its close built, some 13 MB) is then dead.
func AfterClose(f func()) Option {
	return func(o *options) { o.afterClose = f }
}

// WithLogger sets the logger for the store's and Badger's warnings and
// errors; Badger's informational messages go to its debug level.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}
