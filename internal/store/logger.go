package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// badgerLogger sends Badger's messages to slog. Badger reports every
// compaction and table at INFO; those go to slog's debug level so a default
// logger shows only warnings and errors.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.log(errorLevel(f), f, a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug, f, a) }

func (b badgerLogger) log(level slog.Level, format string, args []any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, args...)), "component", "badger")
}

// errorLevel demotes to debug the errors that Badger both logs and returns,
// a damaged value read or a failed open: the store returns them to its caller,
// which reports them once, and Badger would add two lines or more each time.
func errorLevel(format string) slog.Level {
	for _, p := range []string{"Unable to read", "Key: ", "Invalid read", "Received err"} {
		if strings.HasPrefix(format, p) {
			return slog.LevelDebug
		}
	}
	return slog.LevelError
}
