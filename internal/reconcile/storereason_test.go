package reconcile

import (
	"context"
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/store"
)

// Each fault of the tag store has its own reason; the other failures of the store keep Flux's
// ReadOperationFailed.
func TestStoreReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("storing the tags of a/b: %w", store.ErrFull), v1.TagStoreFullReason},
		{fmt.Errorf("reading: %w", store.ErrCorrupt), v1.TagStoreDamagedReason},
		{fmt.Errorf("%w: %w at now", store.ErrNotFound, store.ErrRebuilt), v1.TagStoreDamagedReason},
		{fmt.Errorf("%w: %w", store.ErrLocked, context.DeadlineExceeded), v1.ReadOperationFailedReason},
		{store.ErrUnavailable, v1.ReadOperationFailedReason},
		{errors.New("other"), v1.ReadOperationFailedReason},
	} {
		if got := StoreReason(tc.err); got != tc.want {
			t.Errorf("StoreReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// Only a failed Ready with a store fault's reason is the store's failure.
func TestStoreFailed(t *testing.T) {
	for _, tc := range []struct {
		status        metav1.ConditionStatus
		reason        string
		failed, reads bool
	}{
		{metav1.ConditionFalse, v1.TagStoreFullReason, true, false},
		{metav1.ConditionFalse, v1.TagStoreDamagedReason, true, true},
		{metav1.ConditionFalse, v1.ReadOperationFailedReason, false, false},
		{metav1.ConditionTrue, v1.SucceededReason, false, false},
	} {
		conds := []metav1.Condition{{Type: v1.ReadyCondition, Status: tc.status, Reason: tc.reason}}
		if got := storeFailed(conds); got != tc.failed {
			t.Errorf("storeFailed(Ready=%s %s) = %v, want %v", tc.status, tc.reason, got, tc.failed)
		}
		if got := readDamaged(conds); got != tc.reads {
			t.Errorf("readDamaged(Ready=%s %s) = %v, want %v", tc.status, tc.reason, got, tc.reads)
		}
	}
	if storeFailed(nil) || readDamaged(nil) {
		t.Error("no Ready condition counts as a store failure")
	}
}
