package redact

import (
	"context"
	"log/slog"
)

// Handler returns a slog.Handler that passes every record on to h with its message and its
// string and error attributes, groups included, made fit by Text: URL userinfo masked,
// characters that are not printable escaped, each at most MaxText bytes. The processes install
// it under their loggers so that a log line is clean and bounded even when the code that wrote
// it did not think of the secrets or the kilobytes of registry text an error may carry; other
// attribute kinds pass unchanged.
func Handler(h slog.Handler) slog.Handler {
	return &handler{inner: h}
}

type handler struct {
	inner slog.Handler
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{inner: h.inner.WithAttrs(attrs(as))}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{inner: h.inner.WithGroup(name)}
}

func attrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = attr(a)
	}
	return out
}

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		v = slog.StringValue(Text(v.String()))
	case slog.KindGroup:
		v = slog.GroupValue(attrs(v.Group())...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			v = slog.StringValue(Text(err.Error()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
