package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
)

// The tests of this file check the decisions that read an object's status, as pure functions
// of objects: no apiserver, no registry, no store.

// evaluatedPolicy returns a policy of generation 2 whose last evaluation, of that generation,
// selected app:1.0.0 from revision rev and handled request "r1"; edit changes it.
func evaluatedPolicy(rev string, edit ...func(*v1.ImagePolicy)) *v1.ImagePolicy {
	p := &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Generation: 2, UID: "u1",
			Annotations: map[string]string{v1.ReconcileRequestAnnotation: "r1"}},
		Status: v1.ImagePolicyStatus{
			ObservedGeneration:   2,
			ObservedTagsRevision: rev,
			LatestRef:            &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.0.0"},
			Conditions: []metav1.Condition{
				{Type: v1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1.SucceededReason, ObservedGeneration: 2},
				{Type: v1.TagsEvaluatedCondition, Status: metav1.ConditionTrue, Reason: v1.EvaluatedReason,
					Message: rev, ObservedGeneration: 2},
			},
		},
	}
	p.Status.LastHandledReconcileAt = "r1"
	for _, e := range edit {
		e(p)
	}
	return p
}

func condition(p *v1.ImagePolicy, typ string) *metav1.Condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func TestAdvanceable(t *testing.T) {
	d := &delta{from: "sha256:a", to: "sha256:b", tags: []string{"1.1.0"}}
	tests := []struct {
		name  string
		pol   *v1.ImagePolicy
		token string
		image string
		want  bool
	}{
		{"evaluated from the delta's start", evaluatedPolicy("sha256:a"), "r1", "ghcr.io/org/app", true},
		{"no request waits", evaluatedPolicy("sha256:a"), "", "ghcr.io/org/app", true},
		{"evaluated from another revision", evaluatedPolicy("sha256:z"), "r1", "ghcr.io/org/app", false},
		{"a request waits", evaluatedPolicy("sha256:a"), "r2", "ghcr.io/org/app", false},
		{"another image", evaluatedPolicy("sha256:a"), "r1", "ghcr.io/org/other", false},
		{"spec edited since", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) { p.Generation = 3 }), "r1", "ghcr.io/org/app", false},
		{"no latestRef", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) { p.Status.LatestRef = nil }), "r1", "ghcr.io/org/app", false},
		{"not Ready", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
			condition(p, v1.ReadyCondition).Status = metav1.ConditionFalse
		}), "r1", "ghcr.io/org/app", false},
		{"revision of an older generation", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
			condition(p, v1.TagsEvaluatedCondition).ObservedGeneration = 1
		}), "r1", "ghcr.io/org/app", false},
		{"never evaluated", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
			p.Status.Conditions = p.Status.Conditions[:1]
		}), "r1", "ghcr.io/org/app", false},
		// An older reflector kept the revision in the message only; Flux's CRD prunes the field.
		{"revision in the message only", evaluatedPolicy("", func(p *v1.ImagePolicy) {
			condition(p, v1.TagsEvaluatedCondition).Message = "sha256:a"
		}), "r1", "ghcr.io/org/app", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := advanceable(tt.pol, tt.token, d, tt.image); got != tt.want {
				t.Errorf("advanceable = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUnchanged(t *testing.T) {
	in := policyInputs{uid: "u1", generation: 2, request: "r1", revision: "sha256:a", image: "ghcr.io/org/app"}
	tests := []struct {
		name     string
		pol      *v1.ImagePolicy
		in       policyInputs
		remember bool
		want     bool
	}{
		{"same inputs, remembered", evaluatedPolicy("sha256:a"), in, true, true},
		{"same inputs, another process", evaluatedPolicy("sha256:a"), in, false, false},
		{"another revision", evaluatedPolicy("sha256:a"), policyInputs{uid: "u1", generation: 2, request: "r1", revision: "sha256:b", image: "ghcr.io/org/app"}, true, false},
		{"status of another revision", evaluatedPolicy("sha256:z"), in, true, false},
		{"revision in the message only", evaluatedPolicy("", func(p *v1.ImagePolicy) {
			condition(p, v1.TagsEvaluatedCondition).Message = "sha256:a"
		}), in, true, false},
		{"digests reflected Always", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
			p.Spec.DigestReflectionPolicy = v1.ReflectAlways
		}), in, true, false},
		{"skipped unverified tags", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
			condition(p, v1.TagsEvaluatedCondition).Reason = v1.SkippedUnverifiedReason
		}), in, true, false},
		{"a new request", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) { p.Status.LastHandledReconcileAt = "r0" }), in, true, false},
		{"failed since", evaluatedPolicy("sha256:a", func(p *v1.ImagePolicy) {
			condition(p, v1.ReadyCondition).Status = metav1.ConditionFalse
		}), in, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Evaluator{}
			if tt.remember {
				e.remember(tt.pol, in)
			}
			if got := e.unchanged(tt.pol, tt.in); got != tt.want {
				t.Errorf("unchanged = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSkippedUnverified(t *testing.T) {
	tests := []struct {
		name  string
		ready metav1.ConditionStatus
		// reason of TagsEvaluated; empty: no such condition.
		reason string
		want   bool
	}{
		{"skipped, Ready", metav1.ConditionTrue, v1.SkippedUnverifiedReason, true},
		{"skipped, then failed", metav1.ConditionFalse, v1.SkippedUnverifiedReason, false},
		{"nothing skipped", metav1.ConditionTrue, v1.EvaluatedReason, false},
		{"never evaluated", metav1.ConditionTrue, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conds := []metav1.Condition{{Type: v1.ReadyCondition, Status: tt.ready,
				Message: "Latest image tag for 'app' resolved to 1.0.0; " + skippedNote + "1.1.0 (not signed)"}}
			if tt.reason != "" {
				conds = append(conds, metav1.Condition{Type: v1.TagsEvaluatedCondition, Status: metav1.ConditionTrue, Reason: tt.reason})
			}
			if got := skippedUnverified(conds); got != tt.want {
				t.Errorf("skippedUnverified = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRepeatsRefusal(t *testing.T) {
	refused := func(stalled bool, edit ...func(*v1.ImagePolicy)) *v1.ImagePolicy {
		return evaluatedPolicy("sha256:a", append([]func(*v1.ImagePolicy){func(p *v1.ImagePolicy) {
			p.Status.Conditions = nil
			if stalled {
				markStalled(&p.Status.Conditions, 2, v1.AccessDeniedReason, "access denied")
			} else {
				markFailed(&p.Status.Conditions, 2, v1.AccessDeniedReason, "access denied")
			}
		}}, edit...)...)
	}
	tests := []struct {
		name    string
		pol     *v1.ImagePolicy
		stalled bool
		want    bool
	}{
		{"the same refusal", refused(false), false, true},
		{"the same stalled refusal", refused(true), true, true},
		{"stalled now", refused(false), true, false},
		{"no longer stalled", refused(true), false, false},
		{"spec edited since", refused(false, func(p *v1.ImagePolicy) { p.Generation = 3 }), false, false},
		{"a request waits", refused(false, func(p *v1.ImagePolicy) {
			p.Annotations[v1.ReconcileRequestAnnotation] = "r2"
		}), false, false},
		{"another failure", refused(false, func(p *v1.ImagePolicy) {
			condition(p, v1.ReadyCondition).Reason = v1.DependencyNotReadyReason
		}), false, false},
		{"Ready", evaluatedPolicy("sha256:a"), false, false},
		// The message is not what tells the refusal: its wording may differ.
		{"another message", refused(false, func(p *v1.ImagePolicy) {
			condition(p, v1.ReadyCondition).Message = "worded otherwise"
		}), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := repeatsRefusal(tt.pol, tt.stalled); got != tt.want {
				t.Errorf("repeatsRefusal = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFollowUpMerge(t *testing.T) {
	read := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	rec := NewRecording(read)
	ctx := context.Background()
	tests := []struct {
		name         string
		collected    followUp
		some         bool
		req          followUp
		wantTags     []string // nil: a full listing
		wantRecorded time.Time
		wantRecs     int
		joinable     bool
	}{
		{"the first request of a scan that has its object", followUp{read: read}, false,
			followUp{hint: &Hint{Tags: []string{"1.0.0"}}, trace: ctx, recorded: read.Add(time.Second)},
			[]string{"1.0.0"}, read.Add(time.Second), 0, true},
		{"a request recorded before the scan read", followUp{read: read}, false,
			followUp{hint: &Hint{Tags: []string{"1.0.0"}}, trace: ctx, recorded: read.Add(-time.Second)},
			[]string{"1.0.0"}, read.Add(-time.Second), 0, false},
		{"a scan that has no object yet", followUp{}, false,
			followUp{hint: &Hint{Tags: []string{"1.0.0"}}, trace: ctx, recorded: read},
			[]string{"1.0.0"}, read, 0, false},
		{"tags add up", followUp{read: read, hint: &Hint{Tags: []string{"1.0.0"}}, recorded: read.Add(time.Second)}, true,
			followUp{hint: &Hint{Tags: []string{"1.1.0"}}, trace: ctx},
			[]string{"1.0.0", "1.1.0"}, read.Add(time.Second), 0, true},
		{"a listing absorbs the tags", followUp{read: read, hint: &Hint{Tags: []string{"1.0.0"}}}, true,
			followUp{trace: ctx}, nil, time.Time{}, 0, false},
		{"a patch on its way is not recorded yet", followUp{read: read}, false,
			followUp{hint: &Hint{Tags: []string{"1.0.0"}}, trace: ctx, recs: []*Recording{rec}},
			[]string{"1.0.0"}, time.Time{}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergeFollowUp(tt.collected, tt.some, tt.req)
			var tags []string
			if got.hint != nil {
				tags = got.hint.Tags
			}
			if len(tags) != len(tt.wantTags) || (tags == nil) != (tt.wantTags == nil) {
				t.Errorf("tags %q, want %q", tags, tt.wantTags)
			}
			for i := range min(len(tags), len(tt.wantTags)) {
				if tags[i] != tt.wantTags[i] {
					t.Errorf("tags %q, want %q", tags, tt.wantTags)
				}
			}
			if !got.recorded.Equal(tt.wantRecorded) || len(got.recs) != tt.wantRecs || !got.read.Equal(tt.collected.read) {
				t.Errorf("recorded %v, %d patches, read %v; want %v, %d, %v", got.recorded, len(got.recs), got.read,
					tt.wantRecorded, tt.wantRecs, tt.collected.read)
			}
			if got.joinable() != tt.joinable {
				t.Errorf("joinable = %v, want %v", got.joinable(), tt.joinable)
			}
		})
	}
}

func TestQuietFor(t *testing.T) {
	many := make([]string, burstTags+1)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	for _, tt := range []struct {
		name string
		hint *Hint
		want time.Duration
	}{
		{"a build's few tags", &Hint{Tags: []string{"1.0.0", "latest"}}, buildQuiet},
		{"a burst", &Hint{Tags: many}, burstQuiet},
		{"a burst the hint no longer holds", &Hint{Tags: []string{"1.0.0"}, More: burstTags}, burstQuiet},
		{"a listing", nil, burstQuiet},
	} {
		if got := quietFor(followUp{hint: tt.hint}); got != tt.want {
			t.Errorf("%s: quiet %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestVerifiedDigest(t *testing.T) {
	old := &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.0.0", Digest: "sha256:old"}
	for _, tt := range []struct {
		reflect v1.ReflectionPolicy
		latest  v1.ImageRef
		want    string
	}{
		{v1.ReflectNever, v1.ImageRef{Name: old.Name, Tag: "1.0.0"}, ""},
		{v1.ReflectIfNotPresent, v1.ImageRef{Name: old.Name, Tag: "1.0.0"}, "sha256:old"},
		{v1.ReflectIfNotPresent, v1.ImageRef{Name: old.Name, Tag: "1.1.0"}, "sha256:new"},
		{v1.ReflectAlways, v1.ImageRef{Name: old.Name, Tag: "1.0.0"}, "sha256:new"},
	} {
		pol := &v1.ImagePolicy{Spec: v1.ImagePolicySpec{DigestReflectionPolicy: tt.reflect},
			Status: v1.ImagePolicyStatus{LatestRef: old}}
		if got := verifiedDigest(pol, &tt.latest, "sha256:new"); got != tt.want {
			t.Errorf("%s, %s: digest %q, want %q", tt.reflect, tt.latest.Tag, got, tt.want)
		}
	}
}

func TestReadyMessage(t *testing.T) {
	for _, tt := range []struct {
		prev *v1.ImageRef
		note string
		want string
	}{
		{nil, "", "Latest image tag for 'ghcr.io/org/app' resolved to 1.1.0"},
		{&v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.1.0"}, "", "Latest image tag for 'ghcr.io/org/app' resolved to 1.1.0"},
		{&v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.0.0"}, "", "Latest image tag for 'ghcr.io/org/app' updated from 1.0.0 to 1.1.0"},
		{nil, skippedNoteOf([]skippedTag{{"1.2.0", "not signed"}}),
			"Latest image tag for 'ghcr.io/org/app' resolved to 1.1.0; " + skippedNote + "1.2.0 (not signed)"},
	} {
		st := &v1.ImagePolicyStatus{LatestRef: &v1.ImageRef{Name: "ghcr.io/org/app", Tag: "1.1.0"}, ObservedPreviousRef: tt.prev}
		if got := withNote(readyMessage(st), tt.note); got != tt.want {
			t.Errorf("message %q, want %q", got, tt.want)
		}
	}
}

func TestScanOutcomeOfStored(t *testing.T) {
	repo := func(rev string) *v1.ImageRepository {
		r := &v1.ImageRepository{}
		if rev != "" {
			r.Status.LastScanResult = &v1.ScanResult{Revision: rev}
		}
		return r
	}
	entry := func(listing string, written bool) stored {
		return stored{revision: "sha256:b", count: 2, latest: []string{"1.0.0", "1.1.0"}, listing: listing, written: written}
	}
	for _, tt := range []struct {
		name        string
		res         stored
		repo        *v1.ImageRepository
		changed     bool
		incremental bool
	}{
		{"a push added a tag", entry("", false), repo("sha256:a"), true, true},
		{"the same list, listed", entry(ListingRequested, false), repo("sha256:b"), false, false},
		{"the same list, replacing another identity's", entry(ListingRequested, true), repo("sha256:b"), true, false},
		{"never scanned", entry(ListingRequested, false), repo(""), true, false},
	} {
		out := tt.res.outcome(tt.repo)
		if out.Changed != tt.changed || out.Incremental != tt.incremental || out.TagCount != 2 || out.Revision != "sha256:b" {
			t.Errorf("%s: %+v, want changed %v, incremental %v", tt.name, out, tt.changed, tt.incremental)
		}
	}
}

func TestVerifiedFailure(t *testing.T) {
	denied := &registry.Error{Reason: v1.AuthenticationFailedReason, Err: errors.New("401")}
	invalid := &registry.Error{Reason: v1.ImageURLInvalidReason, Err: errors.New("bad name")}
	skipped := []skippedTag{{"1.2.0", "not signed"}}
	for _, tt := range []struct {
		name    string
		tag     string
		checked int
		err     error
		failed  bool
		reason  string
		stalled bool
	}{
		{"a verified tag", "1.1.0", 2, nil, false, "", false},
		{"the registry refused", "", 1, fmt.Errorf("heading: %w", denied), true, v1.AuthenticationFailedReason, false},
		{"the image name is invalid", "", 0, invalid, true, v1.ImageURLInvalidReason, true},
		{"no candidates", "", 0, fmt.Errorf("select: %w", policy.ErrNoCandidates), true, v1.FailureReason, false},
		{"nothing checked", "", 0, errors.New("numerical tag does not parse"), true, v1.FailureReason, false},
		{"the verifier could not read", "", 3, errors.New("connection reset"), true, v1.ReadOperationFailedReason, false},
		{"none verifies", "", 10, nil, true, v1.VerificationErrorReason, false},
	} {
		f, failed := verifiedFailure(tt.tag, tt.checked, skipped, tt.err)
		if failed != tt.failed || f.reason != tt.reason || f.stalled != tt.stalled {
			t.Errorf("%s: failed %v, %+v; want %v, reason %q, stalled %v", tt.name, failed, f, tt.failed, tt.reason, tt.stalled)
		}
		if tt.name == "none verifies" && (f.cause == nil || !strings.Contains(f.cause.Error(), "1.2.0 (not signed)")) {
			t.Errorf("%s: cause %v does not name the skipped tags", tt.name, f.cause)
		}
	}
}

func TestNoTagsFailure(t *testing.T) {
	scanned := &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app"},
		Status: v1.ImageRepositoryStatus{LastScanResult: &v1.ScanResult{Revision: "sha256:a"}}}
	fresh := &v1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app"}}
	for _, tt := range []struct {
		name   string
		repo   *v1.ImageRepository
		cause  error
		reason string
		says   string
	}{
		{"never scanned", fresh, store.ErrNotFound, v1.DependencyNotReadyReason, "not been scanned yet"},
		{"an empty list", scanned, nil, v1.DependencyNotReadyReason, "not been scanned yet"},
		{"listed for another spec", scanned, store.ErrOtherIdentity, v1.DependencyNotReadyReason, "waiting for a scan of its current spec"},
		{"lost with a damaged store", scanned, store.ErrRebuilt, v1.TagStoreDamagedReason, "found damaged and rebuilt"},
		{"a damaged store before any scan", fresh, store.ErrRebuilt, v1.DependencyNotReadyReason, "not been scanned yet"},
	} {
		f := noTagsFailure(tt.repo, tt.cause)
		if f.reason != tt.reason || f.stalled || !strings.Contains(f.cause.Error(), tt.says) ||
			!strings.Contains(f.cause.Error(), "ImageRepository apps/app") {
			t.Errorf("%s: %+v (%v), want reason %s saying %q", tt.name, f, f.cause, tt.reason, tt.says)
		}
	}
}
