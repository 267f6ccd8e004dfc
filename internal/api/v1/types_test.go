package v1

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFreshImageRepositoryHasNoScanResult(t *testing.T) {
	b, err := json.Marshal(&ImageRepository{Spec: ImageRepositorySpec{Image: "alpine"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "lastScanResult") {
		t.Errorf("a fresh ImageRepository serialises with lastScanResult: %s", b)
	}
}

func TestImageRepositoryGetters(t *testing.T) {
	tests := []struct {
		name       string
		spec       ImageRepositorySpec
		timeout    time.Duration
		exclusions []string
		provider   string
	}{
		{
			name:       "defaults",
			spec:       ImageRepositorySpec{Interval: metav1.Duration{Duration: 5 * time.Minute}},
			timeout:    5 * time.Minute,
			exclusions: []string{`^.*\.sig$`},
			provider:   "generic",
		},
		{
			name: "explicit",
			spec: ImageRepositorySpec{
				Interval:      metav1.Duration{Duration: time.Hour},
				Timeout:       &metav1.Duration{Duration: 30 * time.Second},
				ExclusionList: []string{"^dev-"},
				Provider:      "aws",
			},
			timeout:    30 * time.Second,
			exclusions: []string{"^dev-"},
			provider:   "aws",
		},
		{
			name:       "timeout has a one second floor",
			spec:       ImageRepositorySpec{Interval: metav1.Duration{Duration: 100 * time.Millisecond}},
			timeout:    time.Second,
			exclusions: []string{`^.*\.sig$`},
			provider:   "generic",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &ImageRepository{Spec: tt.spec}
			if got := r.GetTimeout(); got != tt.timeout {
				t.Errorf("GetTimeout() = %s, want %s", got, tt.timeout)
			}
			if got := r.GetExclusionList(); strings.Join(got, ",") != strings.Join(tt.exclusions, ",") {
				t.Errorf("GetExclusionList() = %q, want %q", got, tt.exclusions)
			}
			if got := r.GetProvider(); got != tt.provider {
				t.Errorf("GetProvider() = %q, want %q", got, tt.provider)
			}
		})
	}
}

func TestImagePolicyGetters(t *testing.T) {
	p := &ImagePolicy{}
	if p.GetDigestReflectionPolicy() != ReflectNever || p.GetInterval() != 0 {
		t.Errorf("defaults: %s, %s", p.GetDigestReflectionPolicy(), p.GetInterval())
	}
	p.Spec.DigestReflectionPolicy = ReflectAlways
	if p.GetInterval() != 10*time.Minute {
		t.Errorf("Always without interval: %s, want 10m", p.GetInterval())
	}
	p.Spec.Interval = &metav1.Duration{Duration: time.Hour}
	if p.GetInterval() != time.Hour {
		t.Errorf("Always with interval: %s, want 1h", p.GetInterval())
	}
	p.Namespace = "apps"
	p.Spec.ImageRepositoryRef = NamespacedObjectReference{Name: "repo"}
	if p.RepositoryNamespace() != "apps" {
		t.Errorf("RepositoryNamespace() = %q, want the policy's own", p.RepositoryNamespace())
	}
	p.Spec.ImageRepositoryRef.Namespace = "images"
	if p.RepositoryNamespace() != "images" {
		t.Errorf("RepositoryNamespace() = %q, want images", p.RepositoryNamespace())
	}
	ref := ImageRef{Name: "ghcr.io/org/app", Tag: "1.0.0"}
	if ref.String() != "ghcr.io/org/app:1.0.0" {
		t.Error(ref.String())
	}
	ref.Digest = "sha256:abc"
	if ref.String() != "ghcr.io/org/app:1.0.0@sha256:abc" {
		t.Error(ref.String())
	}
}
