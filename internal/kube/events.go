package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"

	"github.com/imagereflector/reflector/internal/fluxevent"
	"github.com/imagereflector/reflector/internal/redact"
)

// Recorder emits Kubernetes Events about reflector's objects, and with a Poster also posts each
// as a Flux event to notification-controller. client-go's correlator aggregates repeats and
// rate-limits each object, so a repository that fails on every scan does not flood the API
// server; notification-controller drops duplicates of its own. A nil Recorder emits nothing.
type Recorder struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	poster      *fluxevent.Poster
}

// RecorderOption configures a Recorder.
type RecorderOption func(*Recorder)

// PostingTo makes the Recorder post every Event to p as well; a nil p posts nothing.
func PostingTo(p *fluxevent.Poster) RecorderOption {
	return func(r *Recorder) { r.poster = p }
}

// NewRecorder returns a Recorder that writes Events through c as component.
func NewRecorder(c *Client, component string, opts ...RecorderOption) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(eventSink{events: c.Events})
	r := &Recorder{
		broadcaster: b,
		recorder:    b.NewRecorder(Scheme, corev1.EventSource{Component: component}),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Normal records a Normal event, such as a new scan result or a new latest image.
func (r *Recorder) Normal(obj runtime.Object, reason, message string) {
	r.event(obj, corev1.EventTypeNormal, reason, message)
}

// Warning records a Warning event, such as a failed scan.
func (r *Recorder) Warning(obj runtime.Object, reason, message string) {
	r.event(obj, corev1.EventTypeWarning, reason, message)
}

// event records one Event. Its message is often an error's, so URL userinfo in it is masked,
// and registry text escaped and bounded (redact.Text), here, where every Event and every Flux
// event passes. As Flux's recorder does, the object's
// event.toolkit.fluxcd.io/ annotations go with it.
func (r *Recorder) event(obj runtime.Object, eventType, reason, message string) {
	if r == nil {
		return
	}
	message = redact.Text(message)
	var annotations map[string]string
	if m, err := meta.Accessor(obj); err == nil {
		annotations = fluxevent.Metadata(m.GetAnnotations())
	}
	r.recorder.AnnotatedEventf(obj, annotations, eventType, reason, "%s", message)
	if r.poster == nil {
		return
	}
	// The reference is the one client-go's recorder writes into the Event's involvedObject.
	if ref, err := reference.GetReference(Scheme, obj); err == nil {
		r.poster.Post(*ref, annotations, eventType, reason, message)
	}
}

// Shutdown stops the Recorder after the Events it holds were written, and the Flux events it
// queued were posted or the Poster's drain time ran out.
func (r *Recorder) Shutdown() {
	if r != nil {
		r.broadcaster.Shutdown()
		r.poster.Close()
	}
}

// eventSink is where client-go's broadcaster writes Events: each call goes to the Events of the
// Event's own namespace. Its errors are the REST client's, unwrapped: the broadcaster tells by
// their type (*errors.StatusError) whether to retry, and whether a patch of an Event that no
// longer exists should create it anew. The broadcaster passes no context, as to client-go's
// own sink: only the REST client's timeout, when it has one, bounds a call.
type eventSink struct {
	events *Objects[*corev1.Event, *corev1.EventList]
}

var _ record.EventSink = eventSink{}

// Create writes a new Event.
func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.events.Create(context.Background(), e)
}

// Update replaces an Event the broadcaster wrote before.
func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.events.Update(context.Background(), e)
}

// Patch applies the broadcaster's strategic merge patch (a new count, message and last time) to
// the Event it wrote before. Objects.Patch wraps its errors, so the request is made here.
func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.events.rest.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource(s.events.resource).
		Name(e.Name).Body(data).Do(context.Background()).Into(out)
	return out, err
}
