// Package reconcile holds the decisions and the work that the scan function, the policy function
// and the cron reconciler share: whether an object is due, scanning an ImageRepository, and
// evaluating an ImagePolicy. It is the only package that combines the registry, the tag store,
// the policy engine and the Kubernetes API.
package reconcile

import (
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/store"
)

// Why an object is due. A scan for any reason but Interval and Retry lists the tags in full;
// the others may be served incrementally.
const (
	DueNeverScanned      = "never scanned"
	DueGeneration        = "generation changed"
	DueRequested         = "reconcile requested"
	DueImageChanged      = "image changed"
	DueExclusionsChanged = "exclusion list changed"
	DueInterval          = "interval elapsed"
	DueRetry             = "retrying after failure"
	DueDigestRefresh     = "digest refresh"
	DueTagsChanged       = "tags changed"
	DueFinalizer         = "deleted, holds Flux's finalizer"
	DueNotStored         = "scanned, but its tags are not stored"
	DueStoreBack         = "the tag store failed its last scan and works again"
	DueStoreDamaged      = "a policy found its stored tags damaged"
	DueUnverified        = "skipped newer tags whose signatures did not verify"
	DueRepositoryGone    = "its ImageRepository is gone"
)

// pushRequestSuffix marks the reconcile requests that the scan function's receiver sets for a
// push it was told of, after the time Flux's tools write.
const pushRequestSuffix = "/push"

// PushRequestToken returns the reconcile-request value the receiver sets for a push at now: the
// RFC 3339 time that Flux's tools write, marked as a push's.
func PushRequestToken(now time.Time) string {
	return now.UTC().Format(time.RFC3339Nano) + pushRequestSuffix
}

// RequestedByPush tells whether an ImageRepository's reconcile request is one that a receiver
// set for a push. That receiver scans the repository itself right after it sets the request (and
// the cron reconciler takes the request up if it does not), so an event that announces only
// this change of the object asks for nothing more.
func RequestedByPush(repo *v1.ImageRepository) bool {
	token, ok := repo.Annotations[v1.ReconcileRequestAnnotation]
	return ok && strings.HasSuffix(token, pushRequestSuffix)
}

// Window is the span of time that one cron pass answers for: every pass asks "did anything
// become due in (Now-Period, Now]", so that periodic work that needs no stored timestamp (digest
// refreshes, retries) happens once per period, on a per-object offset that spreads the load.
type Window struct {
	Now    time.Time
	Period time.Duration
}

// RepositoryDue tells whether an ImageRepository needs a scan and why ("" when it does not).
// Suspended repositories are never due. A repository being deleted is due only while it holds
// Flux's finalizer, which the scan removes, suspended or not, as Flux's controller does.
func RepositoryDue(repo *v1.ImageRepository, w Window) string {
	if !repo.DeletionTimestamp.IsZero() {
		return finalizerDue(repo)
	}
	if repo.Spec.Suspend {
		return suspendedDue(repo.Annotations, repo.Status.LastHandledReconcileAt)
	}
	st := &repo.Status
	if repo.Generation != st.ObservedGeneration {
		if st.LastScanResult == nil {
			return DueNeverScanned
		}
		return DueGeneration
	}
	if token, ok := repo.Annotations[v1.ReconcileRequestAnnotation]; ok && token != st.LastHandledReconcileAt {
		return DueRequested
	}
	if apimeta.IsStatusConditionTrue(st.Conditions, v1.StalledCondition) {
		return "" // only a spec change helps, and that changes the generation
	}
	if apimeta.IsStatusConditionFalse(st.Conditions, v1.ReadyCondition) {
		// The last scan failed: lastScanResult still holds the last success, so its interval
		// has long passed; retry once per period instead of on every pass.
		if crossed(w, retryPeriod(repo.GetRequeueAfter()), offset(repo.Namespace, repo.Name)) {
			return DueRetry
		}
		return ""
	}
	if st.LastScanResult == nil {
		return DueNeverScanned
	}
	if canonical, err := imagename.Canonical(repo.Spec.Image, repo.Spec.Insecure); err == nil && canonical != st.CanonicalImageName {
		return DueImageChanged
	}
	if !slices.Equal(repo.GetExclusionList(), st.ObservedExclusionList) {
		return DueExclusionsChanged
	}
	if interval := repo.GetRequeueAfter(); interval > 0 && !w.Now.Before(st.LastScanResult.ScanTime.Add(interval)) {
		return DueInterval
	}
	return ""
}

// PolicyDue tells whether an ImagePolicy needs an evaluation and why ("" when it does not).
// repoRevision is the tag revision its ImageRepository reports ("" when unknown): the scan
// function announces every change, and this catches the announcements that were lost. A policy
// being deleted is due only while it holds Flux's finalizer, as RepositoryDue.
func PolicyDue(pol *v1.ImagePolicy, repoRevision string, w Window) string {
	if !pol.DeletionTimestamp.IsZero() {
		return finalizerDue(pol)
	}
	if pol.Spec.Suspend {
		return suspendedDue(pol.Annotations, pol.Status.LastHandledReconcileAt)
	}
	st := &pol.Status
	if pol.Generation != st.ObservedGeneration {
		return DueGeneration
	}
	if token, ok := pol.Annotations[v1.ReconcileRequestAnnotation]; ok && token != st.LastHandledReconcileAt {
		return DueRequested
	}
	ready := apimeta.FindStatusCondition(st.Conditions, v1.ReadyCondition)
	if ready != nil && ready.Status == metav1.ConditionTrue && repoRevision != "" {
		if st.ObservedTagsRevision != repoRevision {
			return DueTagsChanged
		}
	}
	if interval := pol.GetInterval(); interval > 0 && crossed(w, interval, offset(pol.Namespace, pol.Name)) {
		return DueDigestRefresh
	}
	if skippedUnverified(st.Conditions) && crossed(w, policyRetryPeriod, offset(pol.Namespace, pol.Name)) {
		// A signature pushed since may not have been announced: a registry with the referrers
		// API takes one without a tag, and most registries send no notification of that.
		return DueUnverified
	}
	if ready == nil || ready.Status != metav1.ConditionTrue {
		if apimeta.IsStatusConditionTrue(st.Conditions, v1.StalledCondition) {
			return "" // only a spec change helps, and that changes the generation
		}
		if crossed(w, policyRetryPeriod, offset(pol.Namespace, pol.Name)) {
			return DueRetry
		}
	}
	return ""
}

// RepositoryGoneDue tells whether an ImagePolicy whose ImageRepository no longer exists needs an
// evaluation: while it still says Ready, the announcement of the deletion was lost (a Trigger
// that was being replaced, a broker that dropped it), and only an evaluation reports the missing
// repository. A policy that is not Ready retries on its own period.
func RepositoryGoneDue(pol *v1.ImagePolicy) string {
	if !pol.DeletionTimestamp.IsZero() || pol.Spec.Suspend {
		return ""
	}
	if apimeta.IsStatusConditionTrue(pol.Status.Conditions, v1.ReadyCondition) {
		return DueRepositoryGone
	}
	return ""
}

// finalizerDue tells whether an object being deleted waits for reflector: it holds the
// finalizer of Flux's controller, which nobody else will remove.
func finalizerDue(obj metav1.Object) string {
	if slices.Contains(obj.GetFinalizers(), v1.ImageFinalizer) {
		return DueFinalizer
	}
	return ""
}

// policyRetryPeriod is how often a policy that is not Ready is evaluated again. Evaluations read
// the tag store only, so a short period costs the registries nothing.
const policyRetryPeriod = 2 * time.Minute

// retryPeriod is how often a failing ImageRepository is scanned again: its interval, but at
// least every ten minutes so that a fixed registry or Secret is noticed.
func retryPeriod(interval time.Duration) time.Duration {
	if interval <= 0 || interval > 10*time.Minute {
		return 10 * time.Minute
	}
	return interval
}

// crossed tells whether a time offset+k*period (k an integer) lies in the window.
func crossed(w Window, period, off time.Duration) bool {
	if period <= 0 || w.Period <= 0 {
		return false
	}
	if w.Period >= period {
		return true
	}
	now := w.Now.UnixNano() - int64(off%period)
	return now/int64(period) != (now-int64(w.Period))/int64(period)
}

// offset spreads objects over a period: a stable per-object duration.
func offset(namespace, name string) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(name))
	return time.Duration(h.Sum64() >> 1)
}

// unstored tells whether a repository that RepositoryDue finds not due should be scanned because
// the store holds no tags for it: only one that is live, not suspended, and whose last scan
// succeeded (a failing one is retried by RepositoryDue's own rule).
func unstored(repo *v1.ImageRepository) bool {
	return repo.DeletionTimestamp.IsZero() && !repo.Spec.Suspend && repo.Status.LastScanResult != nil &&
		!apimeta.IsStatusConditionFalse(repo.Status.Conditions, v1.ReadyCondition)
}

// StoreReason is the condition reason of a failure of the tag store: TagStoreFull or
// TagStoreDamaged for those faults, ReadOperationFailed for others (a wait that ran out, a
// volume that cannot be opened).
func StoreReason(err error) string {
	switch {
	case errors.Is(err, store.ErrFull):
		return v1.TagStoreFullReason
	case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrRebuilt):
		return v1.TagStoreDamagedReason
	}
	return v1.ReadOperationFailedReason
}

// storeFailed tells whether an object's last reconcile failed because of the tag store's
// damage or a full volume: a fault of the store, not of the object, cured once the store works.
func storeFailed(conds []metav1.Condition) bool {
	ready := apimeta.FindStatusCondition(conds, v1.ReadyCondition)
	return ready != nil && ready.Status == metav1.ConditionFalse &&
		(ready.Reason == v1.TagStoreFullReason || ready.Reason == v1.TagStoreDamagedReason)
}

// readDamaged tells whether a policy's last evaluation found the stored tags damaged.
func readDamaged(conds []metav1.Condition) bool {
	ready := apimeta.FindStatusCondition(conds, v1.ReadyCondition)
	return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == v1.TagStoreDamagedReason
}

// suspendedDue tells whether a suspended object is due: only to acknowledge a reconcile request
// it has not acknowledged, as Flux's controllers do, without scanning or evaluating it.
func suspendedDue(annotations map[string]string, handled string) string {
	if token, ok := annotations[v1.ReconcileRequestAnnotation]; ok && token != handled {
		return DueRequested
	}
	return ""
}

// PolicyEventNotDue tells why an ApiServerSource event about pol needs no evaluation, or ""
// when it does. Events about other kinds are not for the policy function. The object is due
// when its generation or reconcile request is new, or when it is being deleted and holds Flux's
// finalizer. The status writes of evaluations come back as update events and are not due.
func PolicyEventNotDue(pol *v1.ImagePolicy, now time.Time) string {
	if pol.Kind != "" && pol.Kind != v1.ImagePolicyKind {
		return "not an ImagePolicy: " + pol.Kind
	}
	if PolicyDue(pol, "", Window{Now: now}) == "" {
		return "not due: generation and reconcile request already handled, suspended, or being deleted"
	}
	return ""
}
