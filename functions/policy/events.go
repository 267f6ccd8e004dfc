package policy

import (
	"context"
	"fmt"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/redact"
)

// handleEvent evaluates what one CloudEvent is about. An error makes the sender deliver the
// event again, so only the evaluator's own failures are errors; an unknown type is ignored.
func (h *Handler) handleEvent(ctx context.Context, e cloudevents.Event) error {
	start := time.Now()
	var outs []reconcile.PolicyOutcome
	var err error
	switch e.Type() {
	case events.TypeTagsChanged:
		var d events.TagsChanged
		if err := decodeObject(e, &d, &d.Namespace, &d.Name); err != nil {
			return err
		}
		outs, err = h.ev.EvaluateChange(ctx, d)
	case events.TypePolicyRequested:
		var d events.ObjectRef
		if err := decodeObject(e, &d, &d.Namespace, &d.Name); err != nil {
			return err
		}
		var out reconcile.PolicyOutcome
		out, err = h.ev.Evaluate(ctx, d.Namespace, d.Name)
		outs = []reconcile.PolicyOutcome{out}
	case events.TypeAPIServerAdd, events.TypeAPIServerUpdate:
		var pol v1.ImagePolicy
		if err := decodeObject(e, &pol, &pol.Namespace, &pol.Name); err != nil {
			return err
		}
		if why := reconcile.PolicyEventNotDue(&pol, time.Now()); why != "" {
			h.log.InfoContext(ctx, "event ignored", "type", e.Type(), "id", e.ID(), "subject", e.Subject(), "why", why)
			return nil
		}
		var out reconcile.PolicyOutcome
		out, err = h.ev.Evaluate(ctx, pol.Namespace, pol.Name)
		outs = []reconcile.PolicyOutcome{out}
	default:
		h.log.InfoContext(ctx, "event ignored", "type", e.Type(), "id", e.ID(), "source", e.Source(), "why", "unknown type")
		return nil
	}
	attrs := []any{"type", e.Type(), "id", e.ID(), "source", e.Source(), "subject", e.Subject(),
		"policies", len(outs), "duration", time.Since(start)}
	if err != nil {
		h.log.ErrorContext(ctx, "event handled", append(attrs, "error", redact.String(err.Error()))...)
		return err
	}
	h.log.InfoContext(ctx, "event handled", attrs...)
	return nil
}

// decodeObject decodes an event's data into v and requires the namespace and name it names.
func decodeObject(e cloudevents.Event, v any, namespace, name *string) error {
	if err := events.Decode(e, v); err != nil {
		return err
	}
	if err := events.CheckObject(*namespace, *name); err != nil {
		return fmt.Errorf("%s %s: %w", e.Type(), e.ID(), err)
	}
	return nil
}
