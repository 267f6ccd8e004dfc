package kube

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// RequestReconcile sets the reconcile-request annotation of namespace/name to value, the way
// `flux reconcile` does. Once the apiserver has stored it, the request survives any crash: the
// cron reconciler acts on every annotation that differs from status.lastHandledReconcileAt.
func (o *Objects[T, L]) RequestReconcile(ctx context.Context, namespace, name, value string) (T, error) {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"annotations": map[string]string{v1.ReconcileRequestAnnotation: value},
		},
	})
	return o.Patch(ctx, namespace, name, types.MergePatchType, patch)
}

// ReconcileRequest returns the value of obj's reconcile-request annotation, if any.
func ReconcileRequest(annotations map[string]string) (string, bool) {
	v, ok := annotations[v1.ReconcileRequestAnnotation]
	return v, ok
}
