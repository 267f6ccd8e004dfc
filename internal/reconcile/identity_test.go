package reconcile_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/reconcile"
)

// The identity changes with everything that decides which tags are stored, and with nothing
// else.
func TestRepositoryIdentity(t *testing.T) {
	base := func() *v1.ImageRepository {
		return &v1.ImageRepository{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", UID: "2b1f-uid"},
			Spec:       v1.ImageRepositorySpec{Image: "alpine", Interval: metav1.Duration{Duration: time.Hour}},
		}
	}
	id, err := reconcile.RepositoryIdentity(base())
	if err != nil {
		t.Fatal(err)
	}
	if id.UID != "2b1f-uid" || id.Image != "index.docker.io/library/alpine" || id.Listing == "" {
		t.Fatalf("identity %+v", id)
	}
	for what, edit := range map[string]func(*v1.ImageRepository){
		"recreated":        func(r *v1.ImageRepository) { r.UID = "9c3e-uid" },
		"another image":    func(r *v1.ImageRepository) { r.Spec.Image = "ghcr.io/org/app" },
		"exclusion list":   func(r *v1.ImageRepository) { r.Spec.ExclusionList = []string{`^2\.`} },
		"exclusions added": func(r *v1.ImageRepository) { r.Spec.ExclusionList = []string{`^.*\.sig$`, "^dev-"} },
		"plain HTTP":       func(r *v1.ImageRepository) { r.Spec.Insecure = true },
	} {
		r := base()
		edit(r)
		if got, err := reconcile.RepositoryIdentity(r); err != nil || got == id {
			t.Errorf("%s: identity %+v, %v; want another than %+v", what, got, err, id)
		}
	}
	for what, edit := range map[string]func(*v1.ImageRepository){
		"same image, other spelling": func(r *v1.ImageRepository) { r.Spec.Image = "docker.io/library/alpine" },
		"default exclusions spelled": func(r *v1.ImageRepository) { r.Spec.ExclusionList = v1.DefaultExclusionList },
		"credentials":                func(r *v1.ImageRepository) { r.Spec.SecretRef = &v1.LocalObjectReference{Name: "creds"} },
		"interval and timeout": func(r *v1.ImageRepository) {
			r.Spec.Interval.Duration, r.Spec.Timeout = time.Minute, &metav1.Duration{Duration: time.Second}
		},
		"suspended": func(r *v1.ImageRepository) { r.Spec.Suspend = true },
	} {
		r := base()
		edit(r)
		if got, err := reconcile.RepositoryIdentity(r); err != nil || got != id {
			t.Errorf("%s: identity %+v, %v; want %+v", what, got, err, id)
		}
	}
	bad := base()
	bad.Spec.Image = "alpine:3.20"
	if _, err := reconcile.RepositoryIdentity(bad); err == nil {
		t.Error("an image with a tag has an identity")
	}
}
