package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/redact"
)

// statusFields points at the status fields that ImageRepository and ImagePolicy share.
type statusFields struct {
	observedGeneration *int64
	lastHandled        *string
	conditions         *[]metav1.Condition
}

func repositoryFields(r *v1.ImageRepository) statusFields {
	return statusFields{&r.Status.ObservedGeneration, &r.Status.LastHandledReconcileAt, &r.Status.Conditions}
}

func policyFields(p *v1.ImagePolicy) statusFields {
	return statusFields{&p.Status.ObservedGeneration, &p.Status.LastHandledReconcileAt, &p.Status.Conditions}
}

// object is an ImageRepository or an ImagePolicy.
type object[T any] interface {
	kube.Object
	DeepCopy() T
}

// statusObjects is the part of a kube.Objects client that writes status.
type statusObjects[T any] interface {
	PatchStatus(ctx context.Context, old, obj T) (T, error)
	UpdateStatus(ctx context.Context, namespace, name string, mutate func(T) error) (T, error)
}

// statusWriter writes the status of one kind the same way for the scanner and the evaluator.
type statusWriter[T object[T]] struct {
	objects  statusObjects[T]
	fields   func(T) statusFields
	recorder *kube.Recorder
}

// write writes the status that mutate derives as a patch against obj, the object as read, which
// saves a read; when obj is stale (an annotation arrived since), the conflict makes it start over
// from a fresh read, unless the spec changed (errSpecChanged).
func (w statusWriter[T]) write(ctx context.Context, obj T, mutate func(T) error) (T, error) {
	next := obj.DeepCopy()
	if err := mutate(next); err != nil {
		var zero T
		return zero, err
	}
	updated, err := w.objects.PatchStatus(ctx, obj, next)
	if apierrors.IsConflict(err) {
		// What mutate writes was derived from obj's spec: it must not land on another one.
		generation := obj.GetGeneration()
		return w.objects.UpdateStatus(ctx, obj.GetNamespace(), obj.GetName(), func(fresh T) error {
			if fresh.GetGeneration() != generation {
				return fmt.Errorf("%s %s/%s: %w", kindOf(obj), obj.GetNamespace(), obj.GetName(), errSpecChanged)
			}
			return mutate(fresh)
		})
	}
	return updated, err
}

// statusWriteTimeout bounds a status write. The write runs even when the caller's context has
// ended (a store wait that ran out of time must still be reported in the status).
const statusWriteTimeout = 15 * time.Second

// writeContext returns the context of a status write: it outlives a caller that gave up, so
// that what happened is recorded, but not by long.
func writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), statusWriteTimeout)
}

// errSpecChanged is the error of a status write whose object's spec changed since it was read:
// the outcome to write belongs to the old spec.
var errSpecChanged = errors.New("the spec changed since it was read; the outcome is not written")

// fail records a failure of obj in its status, keeping what else the status holds (the stored
// tags' scan result, latestRef), and in a Warning event: Ready=False with reason, and
// Stalled=True when only a spec change can cure it. The reconcile request that obj carries, if
// any, is recorded as handled. The failure is the object's; the error returned is about
// recording it.
//
// A caller that gave up (a shutdown, a cancelled request) records nothing: what failed is the
// reconcile, not the object, and the request is handled again. A deadline is recorded, since a
// registry that answers too late is the object's failure; the write itself outlives it briefly.
func (w statusWriter[T]) fail(ctx context.Context, obj T, reason string, stalled bool, message string) (T, error) {
	kind := kindOf(obj)
	token, _ := kube.ReconcileRequest(obj.GetAnnotations())
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return obj, fmt.Errorf("reconcile of %s %s/%s cut short (%s): %w", kind, obj.GetNamespace(), obj.GetName(), message, context.Cause(ctx))
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	failed := failedStatus{generation: obj.GetGeneration(), request: token, reason: reason, stalled: stalled, message: message}
	updated, err := w.write(wctx, obj, func(o T) error {
		failed.apply(w.fields(o))
		return nil
	})
	if err != nil {
		return obj, fmt.Errorf("writing the failure of %s %s/%s (%s): %w", kind, obj.GetNamespace(), obj.GetName(), message, err)
	}
	w.recorder.Warning(updated, reason, message)
	return updated, nil
}

// failedStatus is a failed reconciliation of an object's generation: the reconcile request
// handled (if any), the reason, whether only a spec change cures it, and the message.
type failedStatus struct {
	generation int64
	request    string
	reason     string
	stalled    bool
	message    string
}

// apply writes s into the status fields f, leaving the other fields as they are.
func (s failedStatus) apply(f statusFields) {
	*f.observedGeneration = s.generation
	if s.request != "" {
		*f.lastHandled = s.request
	}
	if s.stalled {
		markStalled(f.conditions, s.generation, s.reason, s.message)
	} else {
		markFailed(f.conditions, s.generation, s.reason, s.message)
	}
}

// acknowledge records obj's reconcile request as handled without acting on it, as Flux does for
// a suspended object.
func (w statusWriter[T]) acknowledge(ctx context.Context, obj T) error {
	token, ok := kube.ReconcileRequest(obj.GetAnnotations())
	if !ok || token == *w.fields(obj).lastHandled {
		return nil
	}
	if _, err := w.objects.UpdateStatus(ctx, obj.GetNamespace(), obj.GetName(), func(o T) error {
		*w.fields(o).lastHandled = token
		return nil
	}); err != nil {
		return fmt.Errorf("recording the reconcile request of suspended %s %s/%s: %w", kindOf(obj), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// kindOf names obj's kind for a message.
func kindOf(obj runtime.Object) string {
	switch obj.(type) {
	case *v1.ImageRepository:
		return v1.ImageRepositoryKind
	case *v1.ImagePolicy:
		return v1.ImagePolicyKind
	}
	return obj.GetObjectKind().GroupVersionKind().Kind
}

// failureMessage is the message a failure records: cause's, without secrets, escaped and
// bounded (redact.Text).
func failureMessage(cause error) string {
	return redact.Text(cause.Error())
}
