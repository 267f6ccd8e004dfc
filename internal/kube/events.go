package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
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

// NewRecorder returns a Recorder that writes Events as component.
func NewRecorder(core kubernetes.Interface, component string, opts ...RecorderOption) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.CoreV1().Events("")})
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

// event records one Event. Its message is often an error's, so URL userinfo in it is masked
// here, where every Event and every Flux event passes. As Flux's recorder does, the object's
// event.toolkit.fluxcd.io/ annotations go with it.
func (r *Recorder) event(obj runtime.Object, eventType, reason, message string) {
	if r == nil {
		return
	}
	message = redact.String(message)
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
