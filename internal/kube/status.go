package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// UpdateStatus reads namespace/name, lets mutate change the copy's status, and writes the change
// through the status subresource as a JSON merge patch guarded by the resourceVersion it read.
// A conflict starts over from a fresh read, so mutate must derive the status from the object it
// is given. When mutate leaves the status unchanged nothing is written.
//
// A conflict whose fresh read shows the same status as before came from a write to the object's
// metadata or spec (a push burst annotates an object many times a second), not from another
// status writer; the retry then sends its patch without the resourceVersion guard, as Flux's
// controllers write status, because every guarded write would race the next annotation again.
// The patch holds only the status fields that mutate changed.
func (o *Objects[T, L]) UpdateStatus(ctx context.Context, namespace, name string, mutate func(T) error) (T, error) {
	var (
		out        T
		lastStatus []byte
		conflicted bool
	)
	err := retry.RetryOnConflict(statusBackoff, func() error {
		cur, err := o.Get(ctx, namespace, name)
		if err != nil {
			return err
		}
		status, err := statusJSON(cur)
		if err != nil {
			return err
		}
		guarded := !conflicted || !bytes.Equal(status, lastStatus)
		lastStatus = status
		next := cur.DeepCopyObject().(T)
		if err := mutate(next); err != nil {
			return err
		}
		out, err = o.patchStatus(ctx, cur, status, next, guarded)
		conflicted = apierrors.IsConflict(err)
		return err
	})
	return out, err
}

// statusBackoff spaces the retries of a conflicting status write over about two seconds, for
// writers that keep changing the status itself; client-go's default gives up after four tries.
var statusBackoff = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 500 * time.Millisecond}

// PatchStatus writes the difference between old's and obj's status through the status
// subresource, guarded by old's resourceVersion; the apiserver answers a conflict when old is
// stale. When nothing differs it writes nothing and returns old.
func (o *Objects[T, L]) PatchStatus(ctx context.Context, old, obj T) (T, error) {
	oldStatus, err := statusJSON(old)
	if err != nil {
		return old, err
	}
	return o.patchStatus(ctx, old, oldStatus, obj, true)
}

// patchStatus is PatchStatus with old's status already rendered by statusJSON.
func (o *Objects[T, L]) patchStatus(ctx context.Context, old T, oldStatus []byte, obj T, guarded bool) (T, error) {
	patch, err := statusPatch(oldStatus, old.GetResourceVersion(), obj, guarded)
	if err != nil {
		return old, err
	}
	if patch == nil {
		return old, nil
	}
	return o.MergeStatus(ctx, old.GetNamespace(), old.GetName(), patch)
}

// statusPatch returns a merge patch that turns oldStatus (statusJSON of the object read at
// resourceVersion rv) into obj's status, with rv as a precondition when guarded, or nil when the
// statuses are equal.
func statusPatch(oldStatus []byte, rv string, obj any, guarded bool) ([]byte, error) {
	newStatus, err := statusJSON(obj)
	if err != nil {
		return nil, err
	}
	diff, err := jsonpatch.CreateMergePatch(oldStatus, newStatus)
	if err != nil {
		return nil, fmt.Errorf("computing status patch: %w", err)
	}
	if string(diff) == "{}" {
		return nil, nil
	}
	if !guarded {
		return diff, nil
	}
	var p map[string]any
	if err := json.Unmarshal(diff, &p); err != nil {
		return nil, err
	}
	p["metadata"] = map[string]any{"resourceVersion": rv}
	return json.Marshal(p)
}

// statusJSON returns {"status": ...} of an object, so that the merge patch touches status only.
func statusJSON(obj any) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var whole struct {
		Status json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(b, &whole); err != nil {
		return nil, err
	}
	if whole.Status == nil {
		whole.Status = json.RawMessage("{}")
	}
	return json.Marshal(whole)
}
