package reconcile

import (
	"context"
	"log/slog"
	"time"
)

// steps are the times since an evaluation's start at which it finished each of its steps, which
// its log line carries: where a push's time goes in the policy function.
type steps struct {
	start time.Time
	done  []slog.Attr
}

type stepsKey struct{}

// withSteps returns ctx recording the steps of work that starts now.
func withSteps(ctx context.Context) context.Context {
	return context.WithValue(ctx, stepsKey{}, &steps{start: time.Now()})
}

// markStep records that the work of ctx finished step; nothing when ctx records no steps. The
// work of one context is sequential.
func markStep(ctx context.Context, step string) {
	if s, ok := ctx.Value(stepsKey{}).(*steps); ok {
		s.done = append(s.done, slog.Duration(step, time.Since(s.start)))
	}
}

// stepsAttr returns the log attribute of the steps ctx recorded, and false when it recorded none.
func stepsAttr(ctx context.Context) (slog.Attr, bool) {
	s, ok := ctx.Value(stepsKey{}).(*steps)
	if !ok || len(s.done) == 0 {
		return slog.Attr{}, false
	}
	return slog.Attr{Key: "steps", Value: slog.GroupValue(s.done...)}, true
}
