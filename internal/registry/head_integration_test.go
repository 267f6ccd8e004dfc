package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestIntegrationHeadResolvesDigestsOnTheScansTransport(t *testing.T) {
	reg := testenv.NewRegistry(t, testenv.RegistryBasicAuth("robot", "s3cret"))
	first := reg.Push(t, "app", "v1", "stable")
	second := reg.Push(t, "app", "v2")
	kc, ns := apiserver(t)
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

func TestIntegrationHeadRetriesAreNotMultiplied(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	for range 10 {
		reg.Inject(testenv.RegistryServerError().On("/manifests/"))
	}
	c := fast(registry.WithRetries(2, time.Millisecond, time.Millisecond))
	s, err := c.Prepare(context.Background(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	_, err = s.Head(context.Background(), "v1")
	wantError(t, err, v1.ReadOperationFailedReason, "500 Internal Server Error")
	// go-containerregistry would retry each of these three times more if its own retry
	// transport were in the chain.
	if n := countPaths(reg, "/manifests/"); n != 3 {
		t.Errorf("%d HEAD requests, want 3: the first and two retries", n)
	}
}

// TestIntegrationConfirmWaitsForAJustNotifiedTag: a tag that becomes readable shortly after it
// was announced is confirmed; one that never does costs eleven HEADs and a 404.
func TestIntegrationConfirmWaitsForAJustNotifiedTag(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	s, err := fast().Prepare(context.Background(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	confirmed := make(chan error, 1)
	go func() { _, err := s.Confirm(context.Background(), "v2"); confirmed <- err }()
	// v2 is pushed once Confirm has found it missing.
	testenv.Eventually(t, 10*time.Second, func() error {
		if countPaths(reg, "/manifests/v2") == 0 {
			return errors.New("no HEAD of v2 yet")
		}
		return nil
	})
	reg.Push(t, "app", "v2")
	if err := <-confirmed; err != nil {
		t.Errorf("Confirm(v2) of a tag pushed after its first HEAD: %v", err)
	}

	before := countPaths(reg, "/manifests/")
	_, err = s.Confirm(context.Background(), "never")
	wantError(t, err, v1.ReadOperationFailedReason, `tag "never" not found`)
	if n := countPaths(reg, "/manifests/") - before; n != 11 {
		t.Errorf("%d HEADs for a tag that never appears, want 11", n)
	}
}
