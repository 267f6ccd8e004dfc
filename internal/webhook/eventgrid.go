package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Azure Event Grid's Microsoft.ContainerRegistry.ImagePushed event carries, as its data, the
// same event object that ACR webhooks POST (see acr.go); the CloudEvent id is the delivery id.
//
// An event subscription with the CloudEvents v1.0 schema POSTs to a webhook either one event in
// structured mode (application/cloudevents+json, a JSON object) or, with batching on, a batch
// (application/cloudevents-batch+json, a JSON array of such objects). The body's shape decides,
// so a missing or unusual Content-Type does not matter; an event in binary mode (attributes in
// Ce- headers, the data as the body) is read too. Other event types of the registry
// (ImageDeleted, ChartPushed, ...) are ignored, as acr ignores their webhooks.

// MaxEventGridBatch is the most events one Event Grid delivery may hold; a larger batch is
// malformed. Event Grid's --max-events-per-batch must not exceed it.
const MaxEventGridBatch = 100

func parseEventGrid(ceID string, data []byte) ([]Event, error) {
	return parseACREvent("eventgrid", data, ceID)
}

// structuredEvent is a CloudEvent in the JSON event format: the attributes reflector reads and
// the data, inline JSON or base64.
type structuredEvent struct {
	SpecVersion string          `json:"specversion"`
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data"`
	DataBase64  *string         `json:"data_base64"`
}

// parseEventGridDelivery parses an authentic Event Grid delivery: one CloudEvent or a batch.
func parseEventGridDelivery(req Request) ([]Event, error) {
	ces, err := eventGridEvents(req)
	if err != nil {
		return nil, err
	}
	var events []Event
	var skip skipped
	for i, ce := range ces {
		if err := ce.check(); err != nil {
			return nil, fmt.Errorf("event %d: %w", i+1, err)
		}
		if ce.Type != EventGridImagePushed {
			skip.add("type " + quote(ce.Type))
			continue
		}
		data, err := ce.data()
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", quote(ce.ID), err)
		}
		evs, err := parseEventGrid(ce.ID, data)
		if errors.Is(err, ErrIgnored) {
			skip.add(strings.TrimPrefix(err.Error(), ErrIgnored.Error()+": "))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", quote(ce.ID), err)
		}
		events = append(events, evs...)
	}
	if len(events) == 0 {
		return nil, skip.err(len(ces), "events")
	}
	return events, nil
}

// eventGridEvents decodes the CloudEvents of a delivery: a batch, one event in structured mode,
// or one in binary mode.
func eventGridEvents(req Request) ([]structuredEvent, error) {
	if v := req.Header.Get("Ce-Specversion"); v != "" {
		return []structuredEvent{{SpecVersion: v, ID: req.Header.Get("Ce-Id"), Type: req.Header.Get("Ce-Type"), Data: req.Body}}, nil
	}
	trimmed := bytes.TrimLeft(req.Body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		var ce structuredEvent
		if err := decodeJSON(req.Body, &ce); err != nil {
			return nil, err
		}
		return []structuredEvent{ce}, nil
	}
	return decodeBatch(trimmed)
}

// decodeBatch decodes a JSON array of CloudEvents, one element at a time, and stops at the
// first element past MaxEventGridBatch: a large batch costs no more than its first events.
func decodeBatch(body []byte) ([]structuredEvent, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return nil, malformed("invalid JSON batch")
	}
	var out []structuredEvent
	for dec.More() {
		if len(out) == MaxEventGridBatch {
			return nil, malformed("a batch of more than %d events", MaxEventGridBatch)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, malformed("invalid JSON in the batch's event %d", len(out)+1)
		}
		var ce structuredEvent
		if problem := jsonProblem(raw, &ce); problem != "" {
			return nil, malformed("event %d: %s", len(out)+1, problem)
		}
		out = append(out, ce)
	}
	if _, err := dec.Token(); err != nil {
		return nil, malformed("invalid JSON batch")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, malformed("data after the batch")
	}
	if len(out) == 0 {
		return nil, malformed("empty batch")
	}
	return out, nil
}

// check validates the attributes reflector relies on.
func (ce structuredEvent) check() error {
	switch {
	case ce.SpecVersion != "1.0":
		return malformed("specversion %s is not 1.0", quote(ce.SpecVersion))
	case ce.ID == "":
		return malformed("no id")
	case ce.Type == "":
		return malformed("no type")
	}
	return nil
}

// data returns the event's data, decoded from data_base64 when it travels that way.
func (ce structuredEvent) data() ([]byte, error) {
	if ce.DataBase64 == nil {
		return ce.Data, nil
	}
	b, err := decodeBase64(*ce.DataBase64)
	if err != nil {
		return nil, malformed("data_base64 is not base64")
	}
	return b, nil
}
