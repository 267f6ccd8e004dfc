package reconcile

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// An outcome derived from one spec never lands on another: when the object changed since it was
// read only in its metadata (an annotation), the write starts over from a fresh read; when its
// spec changed, nothing is written and the error says so.
func TestStatusWriteRefusesAnotherSpecIntegration(t *testing.T) {
	env := testenv.Kube(t)
	c, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	pol := &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.ImagePolicySpec{
			ImageRepositoryRef: v1.NamespacedObjectReference{Name: "app"},
			Policy:             v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: ">=1.0.0"}},
		},
	}
	read, err := c.Policies.Create(ctx, pol)
	if err != nil {
		t.Fatal(err)
	}
	w := (&Evaluator{Kube: c}).status()
	setLatest := func(tag string) func(*v1.ImagePolicy) error {
		return func(p *v1.ImagePolicy) error {
			p.Status.LatestRef = &v1.ImageRef{Name: "example.com/app", Tag: tag}
			return nil
		}
	}

	// An annotation since the read: a conflict, then a write from a fresh read.
	if _, err := c.Policies.RequestReconcile(ctx, ns, "app", "now"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.write(ctx, read, setLatest("1.0.0")); err != nil {
		t.Fatalf("write after an annotation: %v", err)
	}

	// A spec edit since the read: refused, and the status keeps what it had.
	read, err = c.Policies.Get(ctx, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	edited := read.DeepCopy()
	edited.Spec.Policy.SemVer.Range = "<1.0.0"
	if _, err := c.Policies.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	if _, err := w.write(ctx, read, setLatest("2.0.0")); !errors.Is(err, errSpecChanged) {
		t.Fatalf("write after a spec edit: %v, want errSpecChanged", err)
	}
	now, err := c.Policies.Get(ctx, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if now.Status.LatestRef == nil || now.Status.LatestRef.Tag != "1.0.0" {
		t.Errorf("latestRef %v after a refused write, want 1.0.0", now.Status.LatestRef)
	}
}
