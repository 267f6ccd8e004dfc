package kube

import "k8s.io/client-go/tools/record"

// EventSinkOf returns the sink a Recorder of c writes its Events to.
func EventSinkOf(c *Client) record.EventSink { return eventSink{events: c.Events} }
