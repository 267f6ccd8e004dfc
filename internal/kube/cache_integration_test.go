package kube_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// A Cache answers nothing before its first listing, then holds every object of the resource as
// the apiserver's watch delivers it: created, changed (status included), indexed and deleted;
// its copies are the caller's to change, and it holds no managed fields.
func TestCacheIntegration(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	policy := func(name, repo string) *v1.ImagePolicy {
		return &v1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.ImagePolicySpec{
				ImageRepositoryRef: v1.NamespacedObjectReference{Name: repo},
				Policy:             v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: ">=1.0.0"}},
			},
		}
	}
	applied := policy("before", "app")
	applied.Annotations = map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"image.toolkit.fluxcd.io/v1"}`,
		"example.com/kept": "yes",
	}
	if _, err := c.Policies.Create(ctx, applied); err != nil {
		t.Fatal(err)
	}

	byRepo := func(p *v1.ImagePolicy) string { return p.Namespace + "/" + p.Spec.ImageRepositoryRef.Name }
	pc := kube.NewCache(c.Policies, map[string]func(*v1.ImagePolicy) string{"repository": byRepo})
	if _, ok := pc.Get(ns, "before"); ok {
		t.Fatal("a Cache that was not started answered")
	}
	if _, ok := pc.Indexed("repository", ns+"/app"); ok {
		t.Fatal("a Cache that was not started answered an index")
	}
	pc.Start(ctx)
	t.Cleanup(pc.Stop)
	testenv.Eventually(t, 30*time.Second, func() error {
		if !pc.Synced() {
			return fmt.Errorf("not synced")
		}
		return nil
	})

	got, ok := pc.Get(ns, "before")
	if !ok || got.Spec.ImageRepositoryRef.Name != "app" {
		t.Fatalf("the object created before the start: %v, %v", got, ok)
	}
	if len(got.ManagedFields) != 0 {
		t.Errorf("the cached copy holds %d managed fields entries", len(got.ManagedFields))
	}
	if want := map[string]string{"example.com/kept": "yes"}; !maps.Equal(got.Annotations, want) {
		t.Errorf("the cached copy's annotations: %v, want %v", got.Annotations, want)
	}
	// A caller's change stays in its copy.
	got.Spec.ImageRepositoryRef.Name = "changed"
	if again, _ := pc.Get(ns, "before"); again.Spec.ImageRepositoryRef.Name != "app" {
		t.Errorf("a change to a returned copy reached the cache: %q", again.Spec.ImageRepositoryRef.Name)
	}

	if _, err := c.Policies.Create(ctx, policy("after", "app")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies.Create(ctx, policy("other", "web")); err != nil {
		t.Fatal(err)
	}
	names := func(index, value string) []string {
		ps, ok := pc.Indexed(index, value)
		if !ok {
			t.Fatalf("index %s %s: not synced", index, value)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := names("repository", ns+"/app"); !slices.Equal(got, []string{"after", "before"}) {
			return fmt.Errorf("policies of app: %v", got)
		}
		if got := names("repository", ns+"/web"); !slices.Equal(got, []string{"other"}) {
			return fmt.Errorf("policies of web: %v", got)
		}
		return nil
	})
	if all, ok := pc.List(ns); !ok || len(all) != 3 {
		t.Errorf("the namespace's policies: %d, %v", len(all), ok)
	}

	// A status write reaches the cache.
	p, err := c.Policies.Get(ctx, ns, "after")
	if err != nil {
		t.Fatal(err)
	}
	next := p.DeepCopy()
	next.Status.LatestRef = &v1.ImageRef{Name: "example.com/app", Tag: "1.2.3"}
	if _, err := c.Policies.PatchStatus(ctx, p, next); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		got, ok := pc.Get(ns, "after")
		if !ok || got.Status.LatestRef == nil || got.Status.LatestRef.Tag != "1.2.3" {
			return fmt.Errorf("the cached status: %+v", got.Status.LatestRef)
		}
		return nil
	})

	if err := c.Policies.Delete(ctx, ns, "before"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, ok := pc.Get(ns, "before"); ok {
			return fmt.Errorf("the deleted object is still cached")
		}
		if got := names("repository", ns+"/app"); !slices.Equal(got, []string{"after"}) {
			return fmt.Errorf("policies of app: %v", got)
		}
		return nil
	})

	pc.Stop()
	pc.Stop()
}
