package kube_test

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/testenv"
)

const otherFinalizer = "example.com/keep"

// A removal from a stale copy neither resurrects nor drops what another writer did in the
// meantime, and leaves every other finalizer in place.
func TestRemoveFinalizerIntegration(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	for _, name := range []string{"only", "shared", "stale"} {
		r := &v1.ImageRepository{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{v1.ImageFinalizer}},
			Spec:       v1.ImageRepositorySpec{Image: "ghcr.io/org/app", Interval: metav1.Duration{Duration: time.Minute}},
		}
		if name != "only" {
			r.Finalizers = []string{otherFinalizer, v1.ImageFinalizer, "example.com/gone"}
		}
		if _, err := c.Repositories.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := c.Repositories.Delete(ctx, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *v1.ImageRepository {
		t.Helper()
		r, err := c.Repositories.Get(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// The last finalizer: the deletion completes.
	if removed, err := c.Repositories.RemoveFinalizer(ctx, get("only"), v1.ImageFinalizer); err != nil || !removed {
		t.Fatalf("RemoveFinalizer = %v, %v", removed, err)
	}
	if _, err := c.Repositories.Get(ctx, ns, "only"); !apierrors.IsNotFound(err) {
		t.Errorf("the object is still there: %v", err)
	}

	// Others stay, in their order.
	if removed, err := c.Repositories.RemoveFinalizer(ctx, get("shared"), v1.ImageFinalizer); err != nil || !removed {
		t.Fatalf("RemoveFinalizer = %v, %v", removed, err)
	}
	if got := get("shared").Finalizers; !slices.Equal(got, []string{otherFinalizer, "example.com/gone"}) {
		t.Errorf("finalizers %v", got)
	}

	// Another writer removes its finalizer after this copy was read.
	stale := get("stale")
	patch := `[{"op":"remove","path":"/metadata/finalizers/2"}]`
	if _, err := c.Repositories.Patch(ctx, ns, "stale", types.JSONPatchType, []byte(patch)); err != nil {
		t.Fatal(err)
	}
	if removed, err := c.Repositories.RemoveFinalizer(ctx, stale, v1.ImageFinalizer); err != nil || !removed {
		t.Fatalf("RemoveFinalizer from a stale copy = %v, %v", removed, err)
	}
	if got := get("stale").Finalizers; !slices.Equal(got, []string{otherFinalizer}) {
		t.Errorf("finalizers %v, want only %s", got, otherFinalizer)
	}
	// Nothing left to remove, and a gone object, are not errors.
	if removed, err := c.Repositories.RemoveFinalizer(ctx, stale, v1.ImageFinalizer); err != nil || removed {
		t.Errorf("RemoveFinalizer again = %v, %v", removed, err)
	}
	for _, name := range []string{"shared", "stale"} {
		if _, err := c.Repositories.Patch(ctx, ns, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := c.Repositories.RemoveFinalizer(ctx, stale, v1.ImageFinalizer); err != nil || removed {
		t.Errorf("RemoveFinalizer of a gone object = %v, %v", removed, err)
	}
}
