package events

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
)

// ErrRejected marks an event that the receiving function refuses for good (undecodable data,
// an unknown type): it answers 400 and the sender must not retry. Other errors answer 500.
var ErrRejected = errors.New("event rejected")

// Handler serves CloudEvents over HTTP in binary and structured mode, one event per request,
// calling fn for each. It answers 202 when fn succeeds. fn's context continues the trace of the
// event's traceparent extension, else of the request's traceparent header, else a new one.
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
		e, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, fmt.Sprintf("not a CloudEvent: %v", err), http.StatusBadRequest)
			return
		}
		if err := e.Validate(); err != nil {
			http.Error(w, fmt.Sprintf("invalid CloudEvent: %v", err), http.StatusBadRequest)
			return
		}
		if err := fn(trace.Continue(r.Context(), traceParent(*e, r.Header)), *e); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrRejected) {
				code = http.StatusBadRequest
			}
			http.Error(w, redact.String(err.Error()), code)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
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
		return fmt.Errorf("%w: %s %s: undecodable data: %v", ErrRejected, e.Type(), e.ID(), err)
	}
	return nil
}
