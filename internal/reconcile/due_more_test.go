package reconcile

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// TestPolicyEventNotDue checks which ApiServerSource events about an ImagePolicy the policy
// function evaluates: a new generation or reconcile request, or a deletion that waits for Flux's
// finalizer; not the echo of its own status writes, nor a suspended policy's spec.
func TestPolicyEventNotDue(t *testing.T) {
	evaluated := func(edit ...func(*v1.ImagePolicy)) *v1.ImagePolicy {
		p := &v1.ImagePolicy{TypeMeta: metav1.TypeMeta{Kind: v1.ImagePolicyKind},
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Generation: 2,
				Annotations: map[string]string{v1.ReconcileRequestAnnotation: "r1"}},
			Status: v1.ImagePolicyStatus{ObservedGeneration: 2,
				Conditions: []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionTrue}}}}
		p.Status.LastHandledReconcileAt = "r1"
		for _, e := range edit {
			e(p)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pol  *v1.ImagePolicy
		due  bool
	}{
		{"the echo of a status write", evaluated(), false},
		{"kind left out", evaluated(func(p *v1.ImagePolicy) { p.Kind = "" }), false},
		{"a new generation", evaluated(func(p *v1.ImagePolicy) { p.Generation = 3 }), true},
		{"a new reconcile request", evaluated(func(p *v1.ImagePolicy) { p.Annotations[v1.ReconcileRequestAnnotation] = "r2" }), true},
		{"never evaluated", evaluated(func(p *v1.ImagePolicy) { p.Status = v1.ImagePolicyStatus{} }), true},
		{"suspended, spec edited", evaluated(func(p *v1.ImagePolicy) { p.Spec.Suspend, p.Generation = true, 3 }), false},
		{"suspended, a new request to acknowledge", evaluated(func(p *v1.ImagePolicy) {
			p.Spec.Suspend = true
			p.Annotations[v1.ReconcileRequestAnnotation] = "r2"
		}), true},
		{"deleted, holds Flux's finalizer", evaluated(deleting[*v1.ImagePolicy](v1.ImageFinalizer)), true},
		{"deleted, holds another finalizer", evaluated(deleting[*v1.ImagePolicy]("example.com/other")), false},
		{"failed, not Ready: the retry is the cron's", evaluated(func(p *v1.ImagePolicy) {
			p.Status.Conditions[0].Status = metav1.ConditionFalse
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := PolicyEventNotDue(tc.pol, now)
			if (why == "") != tc.due {
				t.Errorf("PolicyEventNotDue = %q, want due %v", why, tc.due)
			}
		})
	}
	other := evaluated(func(p *v1.ImagePolicy) { p.Kind, p.Generation = v1.ImageRepositoryKind, 3 })
	if why := PolicyEventNotDue(other, now); why != "not an ImagePolicy: "+v1.ImageRepositoryKind {
		t.Errorf("an ImageRepository's event: %q", why)
	}
}

// TestUnstored checks which repositories that are not due the cron pass scans when the store
// holds no tags for them: live, not suspended, and last scanned with success.
func TestUnstored(t *testing.T) {
	for _, tc := range []struct {
		name string
		repo *v1.ImageRepository
		want bool
	}{
		{"scanned, Ready", scanned(now), true},
		{"never scanned", scanned(now, func(r *v1.ImageRepository) { r.Status.LastScanResult = nil }), false},
		{"suspended", scanned(now, func(r *v1.ImageRepository) { r.Spec.Suspend = true }), false},
		{"being deleted", scanned(now, deleting[*v1.ImageRepository](v1.ImageFinalizer)), false},
		{"its last scan failed", scanned(now, func(r *v1.ImageRepository) {
			r.Status.Conditions[0].Status = metav1.ConditionFalse
		}), false},
		{"no Ready condition yet", scanned(now, func(r *v1.ImageRepository) { r.Status.Conditions = nil }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unstored(tc.repo); got != tc.want {
				t.Errorf("unstored = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRetryPeriod checks how often a failing ImageRepository is scanned again: its interval,
// at most ten minutes.
func TestRetryPeriod(t *testing.T) {
	for interval, want := range map[time.Duration]time.Duration{
		0:                10 * time.Minute,
		-time.Minute:     10 * time.Minute,
		time.Minute:      time.Minute,
		10 * time.Minute: 10 * time.Minute,
		time.Hour:        10 * time.Minute,
	} {
		if got := retryPeriod(interval); got != want {
			t.Errorf("retryPeriod(%s) = %s, want %s", interval, got, want)
		}
	}
}

// TestCrossed checks the window rule that spreads periodic work: a time offset+k*period falls
// in the window (Now-Period, Now] of exactly one pass.
func TestCrossed(t *testing.T) {
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const period, pass = 10 * time.Minute, time.Minute
	for _, off := range []time.Duration{0, 90 * time.Second, 9*time.Minute + 59*time.Second} {
		hits := 0
		for i := 1; i <= 10; i++ {
			if crossed(Window{Now: base.Add(time.Duration(i) * pass), Period: pass}, period, off) {
				hits++
			}
		}
		if hits != 1 {
			t.Errorf("offset %s: due in %d of the period's ten passes, want 1", off, hits)
		}
	}
	if !crossed(Window{Now: base, Period: period}, period, 3*time.Minute) {
		t.Error("a window as long as the period does not cross it")
	}
	if crossed(Window{Now: base, Period: 0}, period, 0) || crossed(Window{Now: base, Period: pass}, 0, 0) {
		t.Error("an empty window or period crossed")
	}
}
