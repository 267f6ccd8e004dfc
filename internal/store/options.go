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
	linger   time.Duration
	logger   *slog.Logger
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

// WithLinger sets how long the directory stays open after the last call
// ends, so that a burst of calls opens it once. A waiting process cuts the
// linger short.
func WithLinger(d time.Duration) Option {
	return func(o *options) { o.linger = max(d, 0) }
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
