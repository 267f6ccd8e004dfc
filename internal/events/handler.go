package events

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
)

// ErrRejected marks an event that the receiving function refuses for good (undecodable data,
// an unknown type): it answers 400 and the sender must not retry. Other errors answer 500.
var ErrRejected = errors.New("event rejected")

// ErrTooMany marks an event refused because its sender exceeds its rate: the handler answers 429
// with Retry-After, and the sender retries later.
var ErrTooMany = errors.New("too many events from this sender")

// MaxEventBytes is the largest CloudEvent request body a handler reads (413 above it). The
// largest event reflector receives is an ApiServerSource event carrying a whole ImageRepository
// or ImagePolicy, a few KiB; etcd itself refuses objects over 1.5 MiB.
const MaxEventBytes = 1 << 20

// Handler serves CloudEvents over HTTP in binary and structured mode, one event per request,
// calling fn for each. It answers 202 when fn succeeds. fn's context continues the trace of the
// event's traceparent extension, else of the request's traceparent header, else a new one.
//
// The body is capped at MaxEventBytes before anything decodes it, and an answer repeats at most
// a Brief prefix of whatever the sender sent.
//
// It decodes each request by itself instead of using the SDK's receive handler (which
// functions-framework-go also uses): that one hands requests to goroutines through a shared
// channel and can leave a request blocked forever under concurrent load.
func Handler(fn func(context.Context, cloudevents.Event) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "CloudEvents are POSTed", http.StatusMethodNotAllowed)
			return
		}
		if r.ContentLength > MaxEventBytes {
			http.Error(w, fmt.Sprintf("event larger than %d bytes", MaxEventBytes), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxEventBytes)
		e, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				http.Error(w, fmt.Sprintf("event larger than %d bytes", MaxEventBytes), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "not a CloudEvent: "+Brief(err.Error()), http.StatusBadRequest)
			return
		}
		if err := e.Validate(); err != nil {
			http.Error(w, "invalid CloudEvent: "+Brief(err.Error()), http.StatusBadRequest)
			return
		}
		if err := checkAttributes(*e); err != nil {
			http.Error(w, "invalid CloudEvent: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := fn(trace.Continue(r.Context(), traceParent(*e, r.Header)), *e); err != nil {
			code := http.StatusInternalServerError
			switch {
			case errors.Is(err, ErrRejected):
				code = http.StatusBadRequest
			case errors.Is(err, ErrTooMany):
				code = http.StatusTooManyRequests
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, Brief(redact.String(err.Error())), code)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
}

// MaxAttributeBytes bounds the context attributes that reflector reads and logs (id, source,
// type, subject): real ones are UUIDs, URLs and names far below it.
const MaxAttributeBytes = 512

// checkAttributes refuses an event whose id, source, type or subject exceeds MaxAttributeBytes.
func checkAttributes(e cloudevents.Event) error {
	for _, a := range [...]struct{ name, value string }{
		{"id", e.ID()}, {"source", e.Source()}, {"type", e.Type()}, {"subject", e.Subject()},
	} {
		if len(a.value) > MaxAttributeBytes {
			return fmt.Errorf("attribute %s is %d bytes, more than %d", a.name, len(a.value), MaxAttributeBytes)
		}
	}
	return nil
}

// briefLimit is how many bytes of untrusted text an answer or a log line repeats.
const briefLimit = 256

// Brief bounds text that may hold what a sender sent, for an answer or a log line: at most
// briefLimit bytes, cut at a rune boundary and marked as cut, on one line.
func Brief(s string) string {
	if len(s) > briefLimit {
		cut := briefLimit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "... (" + strconv.Itoa(len(s)) + " bytes)"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			q := strconv.Quote(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

// traceParent returns the trace context an event carries: its distributed tracing extension, or
// else the traceparent header of the request that brought it.
func traceParent(e cloudevents.Event, h http.Header) string {
	if v, ok := e.Extensions()[trace.Header].(string); ok && v != "" {
		return v
	}
	return h.Get(trace.Header)
}

// Decode reads an event's JSON data into v, wrapping a failure in ErrRejected.
func Decode(e cloudevents.Event, v any) error {
	if err := e.DataAs(v); err != nil {
		return fmt.Errorf("%w: %s %s: undecodable data: %s", ErrRejected, Brief(e.Type()), Brief(e.ID()), Brief(err.Error()))
	}
	return nil
}
