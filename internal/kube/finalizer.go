package kube

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// RemoveFinalizer removes every occurrence of finalizer from obj's metadata.finalizers and
// reports whether this call removed it. The JSON patch tests the object's UID and the whole
// list as last read before it replaces the list, so a finalizer that another writer adds or
// removes meanwhile is never lost, and a successor of the same name is never touched; a failed
// test reads the object again and starts over. An object that is gone, or that no longer holds
// the finalizer, needs nothing.
func (o *Objects[T, L]) RemoveFinalizer(ctx context.Context, obj T, finalizer string) (bool, error) {
	cur := obj
	removed := false
	err := retry.OnError(finalizerBackoff, apierrors.IsInvalid, func() error {
		list := cur.GetFinalizers()
		if !slices.Contains(list, finalizer) {
			return nil
		}
		patch, err := removePatch(string(obj.GetUID()), list, finalizer)
		if err != nil {
			return err
		}
		_, err = o.Patch(ctx, obj.GetNamespace(), obj.GetName(), types.JSONPatchType, patch)
		switch {
		case err == nil:
			removed = true
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsInvalid(err):
			return err
		}
		// A failed test is answered as Invalid: the list or the object changed since it was read.
		fresh, gerr := o.Get(ctx, obj.GetNamespace(), obj.GetName())
		if apierrors.IsNotFound(gerr) {
			return nil
		}
		if gerr != nil {
			return gerr
		}
		if fresh.GetUID() != obj.GetUID() {
			return nil
		}
		cur = fresh
		return err
	})
	return removed, err
}

// finalizerBackoff spaces the retries of a finalizer removal whose list kept changing.
var finalizerBackoff = wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: time.Second}

// removePatch is a JSON patch that replaces the finalizers list, if it is still list on the
// object of uid, with the list without finalizer.
func removePatch(uid string, list []string, finalizer string) ([]byte, error) {
	rest := slices.DeleteFunc(slices.Clone(list), func(f string) bool { return f == finalizer })
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	return json.Marshal([]op{
		{"test", "/metadata/uid", uid},
		{"test", "/metadata/finalizers", list},
		{"replace", "/metadata/finalizers", rest},
	})
}
