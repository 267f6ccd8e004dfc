package kube_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// The sink writes what client-go's broadcaster asks for, and fails as the broadcaster expects:
// with a *StatusError itself, not wrapped, since the broadcaster tells by the error's type
// whether to retry and whether a patch of a vanished Event should create it anew.
func TestEventSinkIntegration(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	sink := kube.EventSinkOf(c)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app.1"},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: v1.GroupVersion.String(), Kind: v1.ImageRepositoryKind, Namespace: ns, Name: "app",
		},
		Reason: "Succeeded", Message: "found 1 tags", Type: corev1.EventTypeNormal, Count: 1,
		Source:         corev1.EventSource{Component: "reflector-test"},
		FirstTimestamp: now, LastTimestamp: now,
	}

	created, err := sink.Create(ev)
	if err != nil {
		t.Fatal(err)
	}
	if created.ResourceVersion == "" || created.Message != ev.Message {
		t.Fatalf("Create returned %+v", created)
	}
	_, err = sink.Create(ev)
	if se, ok := err.(*apierrors.StatusError); !ok || !apierrors.IsAlreadyExists(se) {
		t.Errorf("creating it again: %T %v, want an AlreadyExists *StatusError", err, err)
	}

	patched, err := sink.Patch(created, []byte(`{"count":2,"message":"found 2 tags"}`))
	if err != nil {
		t.Fatal(err)
	}
	if patched.Count != 2 || patched.Message != "found 2 tags" || patched.Reason != ev.Reason {
		t.Errorf("Patch returned count %d, message %q, reason %q", patched.Count, patched.Message, patched.Reason)
	}

	patched.Message = "found 3 tags"
	patched.Count = 3
	updated, err := sink.Update(patched)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.Events.Get(ctx, ns, ev.Name)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Count != 3 || stored.Message != "found 3 tags" || stored.ResourceVersion != updated.ResourceVersion {
		t.Errorf("stored after Update: count %d, message %q, version %s (Update returned %s)",
			stored.Count, stored.Message, stored.ResourceVersion, updated.ResourceVersion)
	}

	gone := ev.DeepCopy()
	gone.Name = "app.gone"
	_, err = sink.Patch(gone, []byte(`{"count":2}`))
	if se, ok := err.(*apierrors.StatusError); !ok || se.Status().Code != http.StatusNotFound {
		t.Errorf("patching a missing Event: %T %v, want a 404 *StatusError", err, err)
	}
}
