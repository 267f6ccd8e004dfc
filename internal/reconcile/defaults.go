package reconcile

import (
	"log/slog"
	"time"
)

// clock is the clock that a Now field of Evaluator or Pass names: time.Now when it is
// nil.
func clock(now func() time.Time) func() time.Time {
	if now != nil {
		return now
	}
	return time.Now
}

// logger is the logger that a Log field of Scanner, Evaluator or Pass names: slog.Default()
// when it is nil.
func logger(log *slog.Logger) *slog.Logger {
	if log != nil {
		return log
	}
	return slog.Default()
}
