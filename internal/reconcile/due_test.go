package reconcile

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// scanned returns an ImageRepository whose last scan, at scanTime, matched its spec.
func scanned(scanTime time.Time, mutate ...func(*v1.ImageRepository)) *v1.ImageRepository {
	r := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Generation: 2},
		Spec: v1.ImageRepositorySpec{
			Image:    "ghcr.io/org/app",
			Interval: metav1.Duration{Duration: 5 * time.Minute},
		},
		Status: v1.ImageRepositoryStatus{
			ObservedGeneration:    2,
			CanonicalImageName:    "ghcr.io/org/app",
			ObservedExclusionList: []string{`^.*\.sig$`},
			LastScanResult:        &v1.ScanResult{TagCount: 3, ScanTime: metav1.NewTime(scanTime)},
			Conditions:            []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionTrue}},
		},
	}
	for _, m := range mutate {
		m(r)
	}
	return r
}

// deleting marks an object as being deleted while it holds finalizers.
func deleting[T metav1.Object](finalizers ...string) func(T) {
	return func(obj T) {
		ts := metav1.NewTime(now.Add(-time.Second))
		obj.SetDeletionTimestamp(&ts)
		obj.SetFinalizers(finalizers)
	}
}

func TestRepositoryDue(t *testing.T) {
	w := Window{Now: now, Period: time.Minute}
	failing := func(r *v1.ImageRepository) {
		r.Status.Conditions = []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionFalse}}
	}
	tests := []struct {
		name string
		repo *v1.ImageRepository
		want string
	}{
		{"fresh scan", scanned(now.Add(-time.Minute)), ""},
		{"interval elapsed", scanned(now.Add(-5 * time.Minute)), DueInterval},
		{"never scanned", scanned(now, func(r *v1.ImageRepository) {
			r.Status = v1.ImageRepositoryStatus{ObservedGeneration: -1}
		}), DueNeverScanned},
		{"generation changed", scanned(now, func(r *v1.ImageRepository) { r.Generation = 3 }), DueGeneration},
		{"annotation differs", scanned(now, func(r *v1.ImageRepository) {
			r.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "2026-11-29T12:00:00Z"}
			r.Status.LastHandledReconcileAt = "2026-11-29T11:00:00Z"
		}), DueRequested},
		{"annotation handled", scanned(now, func(r *v1.ImageRepository) {
			r.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "2026-11-29T12:00:00Z"}
			r.Status.LastHandledReconcileAt = "2026-11-29T12:00:00Z"
		}), ""},
		{"image changed", scanned(now, func(r *v1.ImageRepository) { r.Status.CanonicalImageName = "ghcr.io/org/old" }), DueImageChanged},
		{"exclusion list changed", scanned(now, func(r *v1.ImageRepository) { r.Spec.ExclusionList = []string{"^dev-"} }), DueExclusionsChanged},
		{"suspended", scanned(now.Add(-time.Hour), func(r *v1.ImageRepository) {
			r.Spec.Suspend = true
			r.Generation = 9
		}), ""},
		{"suspended and never scanned", scanned(now, func(r *v1.ImageRepository) {
			r.Spec.Suspend = true
			r.Status = v1.ImageRepositoryStatus{}
		}), ""},
		{"suspended, with a request to acknowledge", scanned(now, func(r *v1.ImageRepository) {
			r.Spec.Suspend = true
			r.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "new"}
		}), DueRequested},
		{"deleted, holding Flux's finalizer", scanned(now, deleting[*v1.ImageRepository](v1.ImageFinalizer, "example.com/other")), DueFinalizer},
		{"deleted and suspended, holding Flux's finalizer", scanned(now, deleting[*v1.ImageRepository](v1.ImageFinalizer), func(r *v1.ImageRepository) {
			r.Spec.Suspend = true
		}), DueFinalizer},
		{"deleted, holding another finalizer", scanned(now.Add(-time.Hour), deleting[*v1.ImageRepository]("example.com/other"), func(r *v1.ImageRepository) {
			r.Generation = 9
		}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RepositoryDue(tt.repo, w); got != tt.want {
				t.Errorf("RepositoryDue() = %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("failing repository retries once per period, not every pass", func(t *testing.T) {
		repo := scanned(now.Add(-time.Hour), failing)
		count := 0
		for i := range 60 { // an hour of one-minute passes
			if RepositoryDue(repo, Window{Now: now.Add(time.Duration(i) * time.Minute), Period: time.Minute}) != "" {
				count++
			}
		}
		// interval 5m: twelve retries an hour.
		if count != 12 {
			t.Errorf("%d retries in an hour, want 12", count)
		}
	})
	t.Run("never succeeded and failed: retried on the period", func(t *testing.T) {
		repo := scanned(now, failing, func(r *v1.ImageRepository) { r.Status.LastScanResult = nil })
		count := 0
		for i := range 60 {
			if RepositoryDue(repo, Window{Now: now.Add(time.Duration(i) * time.Minute), Period: time.Minute}) == DueRetry {
				count++
			}
		}
		if count != 12 {
			t.Errorf("%d retries in an hour, want 12", count)
		}
	})
}

func TestPolicyDue(t *testing.T) {
	w := Window{Now: now, Period: time.Minute}
	policy := func(mutate ...func(*v1.ImagePolicy)) *v1.ImagePolicy {
		p := &v1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Generation: 1},
			Status: v1.ImagePolicyStatus{
				ObservedGeneration: 1,
				Conditions:         []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionTrue}},
			},
		}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	tests := []struct {
		name string
		pol  *v1.ImagePolicy
		want string
	}{
		{"up to date", policy(), ""},
		{"new", policy(func(p *v1.ImagePolicy) { p.Status = v1.ImagePolicyStatus{ObservedGeneration: -1} }), DueGeneration},
		{"edited", policy(func(p *v1.ImagePolicy) { p.Generation = 2 }), DueGeneration},
		{"requested", policy(func(p *v1.ImagePolicy) {
			p.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "x"}
		}), DueRequested},
		{"suspended", policy(func(p *v1.ImagePolicy) { p.Spec.Suspend = true; p.Generation = 5 }), ""},
		{"suspended, with a request to acknowledge", policy(func(p *v1.ImagePolicy) {
			p.Spec.Suspend = true
			p.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "new"}
		}), DueRequested},
		{"deleted, holding Flux's finalizer", policy(deleting[*v1.ImagePolicy](v1.ImageFinalizer)), DueFinalizer},
		{"deleted and suspended, holding Flux's finalizer", policy(deleting[*v1.ImagePolicy](v1.ImageFinalizer), func(p *v1.ImagePolicy) {
			p.Spec.Suspend = true
		}), DueFinalizer},
		{"deleted, holding another finalizer", policy(deleting[*v1.ImagePolicy]("example.com/other"), func(p *v1.ImagePolicy) {
			p.Generation = 2
		}), ""},
		{"stalled waits for a spec change", policy(func(p *v1.ImagePolicy) {
			p.Status.Conditions = []metav1.Condition{
				{Type: v1.ReadyCondition, Status: metav1.ConditionFalse},
				{Type: v1.StalledCondition, Status: metav1.ConditionTrue},
			}
		}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PolicyDue(tt.pol, "", w); got != tt.want {
				t.Errorf("PolicyDue() = %q, want %q", got, tt.want)
			}
		})
	}

	count := func(p *v1.ImagePolicy, reason string) int {
		n := 0
		for i := range 60 {
			if PolicyDue(p, "", Window{Now: now.Add(time.Duration(i) * time.Minute), Period: time.Minute}) == reason {
				n++
			}
		}
		return n
	}
	always := policy(func(p *v1.ImagePolicy) {
		p.Spec.DigestReflectionPolicy = v1.ReflectAlways
		p.Spec.Interval = &metav1.Duration{Duration: 10 * time.Minute}
	})
	if n := count(always, DueDigestRefresh); n != 6 {
		t.Errorf("Always every 10m: %d refreshes an hour, want 6", n)
	}
	if n := count(policy(), DueDigestRefresh); n != 0 {
		t.Errorf("Never: %d refreshes an hour", n)
	}
	evaluated := policy(func(p *v1.ImagePolicy) {
		p.Status.ObservedTagsRevision = "rev-1"
		p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: v1.TagsEvaluatedCondition, Status: metav1.ConditionTrue, Message: "rev-1"})
	})
	if got := PolicyDue(evaluated, "rev-1", w); got != "" {
		t.Errorf("evaluated at the repository's revision: %q", got)
	}
	if got := PolicyDue(evaluated, "rev-2", w); got != DueTagsChanged {
		t.Errorf("repository moved on: %q, want %q", got, DueTagsChanged)
	}
	if got := PolicyDue(policy(), "rev-1", w); got != DueTagsChanged {
		t.Errorf("never evaluated against a revision: %q", got)
	}
	// Written by a reflector that kept the revision in the message only, or by Flux's controller,
	// or with the field pruned by Flux's CRD: evaluated again, which writes the field.
	unrecorded := policy(func(p *v1.ImagePolicy) {
		p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: v1.TagsEvaluatedCondition, Status: metav1.ConditionTrue, Message: "rev-1"})
	})
	if got := PolicyDue(unrecorded, "rev-1", w); got != DueTagsChanged {
		t.Errorf("the revision in the message only: %q, want %q", got, DueTagsChanged)
	}
	notReady := policy(func(p *v1.ImagePolicy) {
		p.Status.Conditions = []metav1.Condition{{Type: v1.ReadyCondition, Status: metav1.ConditionFalse}}
	})
	if n := count(notReady, DueRetry); n != 30 {
		t.Errorf("not Ready: %d retries an hour, want 30", n)
	}
	skipped := policy(func(p *v1.ImagePolicy) {
		p.Status.Conditions[0].Message = "Latest image tag for ghcr.io/org/app resolved to 1.0.0; " +
			skippedNote + "1.1.0 (not signed)"
		p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: v1.TagsEvaluatedCondition,
			Status: metav1.ConditionTrue, Reason: v1.SkippedUnverifiedReason})
	})
	if n := count(skipped, DueUnverified); n != 30 {
		t.Errorf("skipped unsigned tags: %d evaluations an hour, want 30", n)
	}
	if n := count(policy(), DueUnverified); n != 0 {
		t.Errorf("nothing skipped: %d evaluations an hour for unverified tags", n)
	}
	// The Ready message is for people: a note in it, without the reason, is no skipped tag.
	noted := policy(func(p *v1.ImagePolicy) {
		p.Status.Conditions[0].Message = "Latest image tag for ghcr.io/org/app resolved to 1.0.0; " +
			skippedNote + "1.1.0 (not signed)"
		p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: v1.TagsEvaluatedCondition,
			Status: metav1.ConditionTrue, Reason: v1.EvaluatedReason})
	})
	if n := count(noted, DueUnverified); n != 0 {
		t.Errorf("a note in the Ready message without reason %s: %d evaluations an hour", v1.SkippedUnverifiedReason, n)
	}
}

func TestOffsetsSpreadObjects(t *testing.T) {
	// A thousand objects with one period are due in different minutes, not all at once.
	perMinute := map[int64]int{}
	for i := range 1000 {
		off := offset("ns", "repo-"+string(rune('a'+i%26))+time.Duration(i).String())
		perMinute[int64(off%(10*time.Minute)/time.Minute)]++
	}
	for m, n := range perMinute {
		if n > 200 {
			t.Errorf("minute %d holds %d of 1000 objects", m, n)
		}
	}
	if len(perMinute) != 10 {
		t.Errorf("objects fall in %d of 10 minutes", len(perMinute))
	}
}

func TestRequestedByPush(t *testing.T) {
	now := time.Date(2026, 11, 30, 22, 0, 0, 5, time.UTC)
	for token, want := range map[string]bool{
		PushRequestToken(now):           true,
		now.Format(time.RFC3339Nano):    false, // flux reconcile's
		"":                              false,
		"push":                          false,
		PushRequestToken(now) + "extra": false,
	} {
		repo := &v1.ImageRepository{}
		repo.Annotations = map[string]string{v1.ReconcileRequestAnnotation: token}
		if got := RequestedByPush(repo); got != want {
			t.Errorf("RequestedByPush(%q) = %v, want %v", token, got, want)
		}
	}
	if RequestedByPush(&v1.ImageRepository{}) {
		t.Error("a repository without a request was requested by a push")
	}
}

func TestRepositoryGoneDue(t *testing.T) {
	ready := func(status metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: v1.ReadyCondition, Status: status}}
	}
	for _, tt := range []struct {
		name string
		pol  v1.ImagePolicy
		want string
	}{
		{"still Ready: the deletion's announcement was lost", v1.ImagePolicy{Status: v1.ImagePolicyStatus{Conditions: ready(metav1.ConditionTrue)}}, DueRepositoryGone},
		{"already reports it", v1.ImagePolicy{Status: v1.ImagePolicyStatus{Conditions: ready(metav1.ConditionFalse)}}, ""},
		{"never evaluated", v1.ImagePolicy{}, ""},
		{"suspended", v1.ImagePolicy{Spec: v1.ImagePolicySpec{Suspend: true}, Status: v1.ImagePolicyStatus{Conditions: ready(metav1.ConditionTrue)}}, ""},
		{"being deleted", v1.ImagePolicy{Status: v1.ImagePolicyStatus{Conditions: ready(metav1.ConditionTrue)}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "being deleted" {
				deleting[*v1.ImagePolicy]()(&tt.pol)
			}
			if got := RepositoryGoneDue(&tt.pol); got != tt.want {
				t.Errorf("RepositoryGoneDue() = %q, want %q", got, tt.want)
			}
		})
	}
}
