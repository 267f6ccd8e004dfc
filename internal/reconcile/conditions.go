package reconcile

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/redact"
)

// The condition changes below follow Flux's conventions, so that `flux get` and kstatus read
// reflector's objects the way they read Flux's:
//
//   - success: Ready=True, no Reconciling, no Stalled;
//   - a failure that a retry may cure: Ready=False with the reason, Reconciling=True with
//     ProgressingWithRetry;
//   - a failure only a spec change cures: Ready=False and Stalled=True with the reason.

// markSucceeded records a successful reconciliation of generation and tells whether the Ready
// condition changed (its status, reason, message or generation).
func markSucceeded(conds *[]metav1.Condition, generation int64, message string) (readyChanged bool) {
	readyChanged = set(conds, metav1.Condition{Type: v1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1.SucceededReason,
		Message: message, ObservedGeneration: generation})
	apimeta.RemoveStatusCondition(conds, v1.ReconcilingCondition)
	apimeta.RemoveStatusCondition(conds, v1.StalledCondition)
	return readyChanged
}

// markFailed records a failure that is retried.
func markFailed(conds *[]metav1.Condition, generation int64, reason, message string) {
	set(conds, metav1.Condition{Type: v1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason,
		Message: message, ObservedGeneration: generation})
	set(conds, metav1.Condition{Type: v1.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: v1.ProgressingWithRetryReason,
		Message: fmt.Sprintf("retrying: %s", message), ObservedGeneration: generation})
	apimeta.RemoveStatusCondition(conds, v1.StalledCondition)
}

// markStalled records a failure that only a change of the spec can cure.
func markStalled(conds *[]metav1.Condition, generation int64, reason, message string) {
	set(conds, metav1.Condition{Type: v1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason,
		Message: message, ObservedGeneration: generation})
	set(conds, metav1.Condition{Type: v1.StalledCondition, Status: metav1.ConditionTrue, Reason: reason,
		Message: message, ObservedGeneration: generation})
	apimeta.RemoveStatusCondition(conds, v1.ReconcilingCondition)
}

// set is where every condition message is written, so it is where URL userinfo that an error
// brought along is masked, and the registry text it may carry escaped and bounded (redact.Text),
// whatever the error's origin: the API server refuses a whole status write for one condition
// message over its limit. It tells whether the condition changed.
func set(conds *[]metav1.Condition, c metav1.Condition) (changed bool) {
	c.Message = redact.Text(c.Message)
	return apimeta.SetStatusCondition(conds, c)
}
