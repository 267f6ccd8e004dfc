// Package trace carries a W3C trace context (https://www.w3.org/TR/trace-context/) through
// reflector, so that one push can be followed from the webhook through the scan function, the
// CloudEvents it emits and the policy function to the ImagePolicy's status: every log line
// written with a context that holds one carries its trace_id.
//
// A request that brings a valid traceparent header (or the CloudEvents distributed tracing
// extension) continues its trace; any other starts a new one. Each process hop gets a span id
// of its own, so the traceparent a function sends names that function as the parent.
package trace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
)

// Header is the HTTP header, and the CloudEvents extension attribute, of a trace context.
const Header = "traceparent"

// Context is one position in a trace: the trace id shared by every hop, the id of the current
// span, and the trace flags (bit 0: sampled).
type Context struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// ErrMalformed wraps a traceparent that does not follow the W3C format.
var ErrMalformed = errors.New("malformed traceparent")

// Parse reads a traceparent value, "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>".
// Versions other than 00 are read by their first four fields, as the specification asks of
// a version it does not know; all-zero ids and version ff are invalid.
func Parse(s string) (Context, error) {
	var c Context
	if len(s) < 55 {
		return c, fmt.Errorf("%w: %d characters, want 55", ErrMalformed, len(s))
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return c, fmt.Errorf("%w: fields are not separated by dashes", ErrMalformed)
	}
	version, err := lowerHex(s[0:2])
	if err != nil {
		return c, err
	}
	switch {
	case version[0] == 0xff:
		return c, fmt.Errorf("%w: version ff is invalid", ErrMalformed)
	case version[0] == 0 && len(s) != 55:
		return c, fmt.Errorf("%w: version 00 has 55 characters, got %d", ErrMalformed, len(s))
	case version[0] != 0 && len(s) > 55 && s[55] != '-':
		return c, fmt.Errorf("%w: fields are not separated by dashes", ErrMalformed)
	}
	tid, err := lowerHex(s[3:35])
	if err != nil {
		return c, err
	}
	sid, err := lowerHex(s[36:52])
	if err != nil {
		return c, err
	}
	flags, err := lowerHex(s[53:55])
	if err != nil {
		return c, err
	}
	copy(c.TraceID[:], tid)
	copy(c.SpanID[:], sid)
	c.Flags = flags[0]
	if c.TraceID == [16]byte{} {
		return Context{}, fmt.Errorf("%w: the trace id is zero", ErrMalformed)
	}
	if c.SpanID == [8]byte{} {
		return Context{}, fmt.Errorf("%w: the parent id is zero", ErrMalformed)
	}
	return c, nil
}

// lowerHex decodes lower-case hex; the format allows no upper case.
func lowerHex(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return nil, fmt.Errorf("%w: %q is not lower-case hex", ErrMalformed, s)
		}
	}
	return hex.DecodeString(s)
}

// String renders the context as a version 00 traceparent.
func (c Context) String() string {
	return fmt.Sprintf("00-%x-%x-%02x", c.TraceID[:], c.SpanID[:], c.Flags)
}

// TraceIDString is the trace id as 32 hex digits, as log lines carry it.
func (c Context) TraceIDString() string { return hex.EncodeToString(c.TraceID[:]) }

// IsValid tells whether c holds a trace.
func (c Context) IsValid() bool { return c.TraceID != [16]byte{} }

// New starts a new trace, sampled.
func New() Context {
	var c Context
	_, _ = rand.Read(c.TraceID[:])
	_, _ = rand.Read(c.SpanID[:])
	c.Flags = 1
	return c
}

// Child returns the context of a new span in the same trace.
func (c Context) Child() Context {
	_, _ = rand.Read(c.SpanID[:])
	return c
}

type key struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Context) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// From returns the trace context ctx carries.
func From(ctx context.Context) (Context, bool) {
	c, ok := ctx.Value(key{}).(Context)
	return c, ok && c.IsValid()
}

// Continue returns ctx carrying a new span of the trace that traceparent names, or of a new
// trace when traceparent is empty or malformed.
func Continue(ctx context.Context, traceparent string) context.Context {
	if c, err := Parse(traceparent); err == nil {
		return With(ctx, c.Child())
	}
	return With(ctx, New())
}

// Ensure returns ctx as it is when it carries a trace, and otherwise with a new one.
func Ensure(ctx context.Context) context.Context {
	if _, ok := From(ctx); ok {
		return ctx
	}
	return With(ctx, New())
}

// Copy returns dst carrying the trace context of src, if any: for work that outlives the request
// that started it but belongs to its trace.
func Copy(dst, src context.Context) context.Context {
	if c, ok := From(src); ok {
		return With(dst, c)
	}
	return dst
}

// Handler wraps a slog.Handler so that each record logged with a context carrying a trace gets
// the attribute trace_id.
func Handler(h slog.Handler) slog.Handler { return &logHandler{inner: h} }

type logHandler struct{ inner slog.Handler }

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if c, ok := From(ctx); ok {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", c.TraceIDString()))
	}
	return h.inner.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{inner: h.inner.WithAttrs(attrs)}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{inner: h.inner.WithGroup(name)}
}
