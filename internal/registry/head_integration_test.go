package registry_test

import (
	"context"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestIntegrationHeadResolvesDigestsOnTheScansTransport(t *testing.T) {
	reg := testenv.NewRegistry(t, testenv.RegistryBasicAuth("robot", "s3cret"))
	first := reg.Push(t, "app", "v1", "stable")
	second := reg.Push(t, "app", "v2")
	kc, ns := kube(t)
	createSecret(t, kc, ns, "pull", "kubernetes.io/dockerconfigjson", dockerConfig(reg.Host(), "robot", "s3cret"))
	obj := imageRepository(ns, reg.Image("app"), func(o *v1.ImageRepository) { o.Spec.SecretRef = &v1.LocalObjectReference{Name: "pull"} })

	s, err := fast().Prepare(context.Background(), kc, obj)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.ListTags(context.Background()); err != nil {
		t.Fatal(err)
	}
	for tag, want := range map[string]string{"v1": first, "stable": first, "v2": second} {
		got, err := s.Head(context.Background(), tag)
		if err != nil {
			t.Fatalf("Head(%s): %v", tag, err)
		}
		if got != want {
			t.Errorf("Head(%s) = %s, want %s", tag, got, want)
		}
	}
	_, err = s.Head(context.Background(), "v3")
	wantError(t, err, v1.ReadOperationFailedReason, `tag "v3" not found`, "404")

	if n := pings(reg); n != 1 {
		t.Errorf("%d pings, want 1 for the whole scan", n)
	}
	if n := countPaths(reg, "/manifests/"); n != 4 {
		t.Errorf("%d manifest requests, want one HEAD per Head call", n)
	}
}
