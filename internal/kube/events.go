package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/imagereflector/reflector/internal/redact"
)

// Recorder emits Kubernetes Events about reflector's objects. client-go's correlator
// aggregates repeats and rate-limits each object, so a repository that fails on every scan does
// not flood the API server. A nil Recorder emits nothing.
type Recorder struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// NewRecorder returns a Recorder that writes Events as component.
func NewRecorder(core kubernetes.Interface, component string) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.CoreV1().Events("")})
	return &Recorder{
		broadcaster: b,
		recorder:    b.NewRecorder(Scheme, corev1.EventSource{Component: component}),
	}
}

// Normal records a Normal event, such as a new scan result or a new latest image.
func (r *Recorder) Normal(obj runtime.Object, reason, message string) {
	if r != nil {
		r.recorder.Event(obj, corev1.EventTypeNormal, reason, redact.String(message))
	}
}

// Warning records a Warning event, such as a failed scan. Its message is usually an error's,
// so URL userinfo in it is masked here, where every Event passes.
func (r *Recorder) Warning(obj runtime.Object, reason, message string) {
	if r != nil {
		r.recorder.Event(obj, corev1.EventTypeWarning, reason, redact.String(message))
	}
}

// Shutdown stops the Recorder after the Events it holds were written.
func (r *Recorder) Shutdown() {
	if r != nil {
		r.broadcaster.Shutdown()
	}
}
