package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// UpdateStatus reads namespace/name, lets mutate change the copy's status, and writes the change
// through the status subresource as a JSON merge patch guarded by the resourceVersion it read.
// A conflict (someone wrote in between) starts over from a fresh read, so mutate must derive the
// status from the object it is given. When mutate leaves the status unchanged nothing is written.
func (o *Objects[T, L]) UpdateStatus(ctx context.Context, namespace, name string, mutate func(T) error) (T, error) {
	var out T
	err := retry.RetryOnConflict(statusBackoff, func() error {
		cur, err := o.Get(ctx, namespace, name)
		if err != nil {
			return err
		}
		next := cur.DeepCopyObject().(T)
		if err := mutate(next); err != nil {
			return err
		}
		out, err = o.PatchStatus(ctx, cur, next)
		return err
	})
	return out, err
}

// statusBackoff spaces the retries of a conflicting status write over about two seconds. A
// push burst annotates an object several times a second, and each annotation makes a status
// write in flight conflict; client-go's default gives up after four tries.
var statusBackoff = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 500 * time.Millisecond}

// PatchStatus writes the difference between old's and obj's status through the status
// subresource, guarded by old's resourceVersion; the apiserver answers a conflict when old is
// stale. When nothing differs it writes nothing and returns old.
func (o *Objects[T, L]) PatchStatus(ctx context.Context, old, obj T) (T, error) {
	patch, err := statusPatch(old, obj)
	if err != nil {
		return old, err
	}
	if patch == nil {
		return old, nil
	}
	return o.Patch(ctx, old.GetNamespace(), old.GetName(), types.MergePatchType, patch, "status")
}

// statusPatch returns a merge patch that turns old's status into obj's, with old's
// resourceVersion as a precondition, or nil when the statuses are equal.
func statusPatch(old, obj any) ([]byte, error) {
	oldStatus, err := statusJSON(old)
	if err != nil {
		return nil, err
	}
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
	var p map[string]any
	if err := json.Unmarshal(diff, &p); err != nil {
		return nil, err
	}
	rv := old.(interface{ GetResourceVersion() string }).GetResourceVersion()
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
