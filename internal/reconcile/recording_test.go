package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// TestRecordingWait: a scan that ran into its deadline learns the result of a patch that has
// returned, every time, and one that is still on its way ends with the context.
func TestRecordingWait(t *testing.T) {
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()

	returned := NewRecording(time.Now())
	want := &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app", ResourceVersion: "7"}}
	returned.Finish(want, nil)
	// Both are ready: a select between them would pick either.
	for range 200 {
		got, err := returned.wait(ended)
		if err != nil || got != want {
			t.Fatalf("wait on a returned patch with an ended context: %v, %v", got, err)
		}
	}

	failed := NewRecording(time.Now())
	patchErr := errors.New("the apiserver refused the patch")
	failed.Finish(nil, patchErr)
	if _, err := failed.wait(ended); !errors.Is(err, patchErr) {
		t.Errorf("wait on a failed patch: %v, want the patch's error", err)
	}

	open := NewRecording(time.Now())
	if got, err := open.wait(ended); got != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait on a patch on its way with an ended context: %v, %v, want the deadline", got, err)
	}
}
