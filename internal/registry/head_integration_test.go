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
	createSecret(t, kc, ns+"/pull", "kubernetes.io/dockerconfigjson", dockerConfig(reg.Host(), "robot", "s3cret"))
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

// TestIntegrationConfirmRetriesATornTagOnce: the first HEAD of a just-announced tag that a
// registry answers 500 (distribution 2.8 reading a tag link it is rewriting) is asked again on
// Confirm's own short schedule, not after the transport's backoff, which here is longer than the
// scan's whole deadline, and so is the first 500 after a 404; a registry that keeps failing gets
// the transport's retries after that.
func TestIntegrationConfirmRetriesATornTagOnce(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	want := reg.Push(t, "app", "v2")
	c := fast(registry.WithRetries(2, time.Hour, time.Hour))
	s, err := c.Prepare(context.Background(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	reg.Inject(testenv.RegistryServerError().On("/manifests/v2"))
	got, err := s.Confirm(context.Background(), "v2")
	if err != nil {
		t.Fatalf("Confirm(v2) after one 500: %v", err)
	}
	if got != want {
		t.Errorf("Confirm(v2) = %s, want %s", got, want)
	}
	if n := countPaths(reg, "/manifests/v2"); n != 2 {
		t.Errorf("%d HEADs of v2, want 2: the 500 and the one after Confirm's first delay", n)
	}

	// A 500 after a 404, at the moment the tag appears, is asked again the same way.
	reg.Inject(testenv.RegistryNotFound().On("/manifests/v2"), testenv.RegistryServerError().On("/manifests/v2"))
	before := countPaths(reg, "/manifests/v2")
	if got, err := s.Confirm(context.Background(), "v2"); err != nil || got != want {
		t.Fatalf("Confirm(v2) after a 404 and a 500 = %s, %v; want %s", got, err, want)
	}
	if n := countPaths(reg, "/manifests/v2") - before; n != 3 {
		t.Errorf("%d HEADs of v2, want 3: the 404, the 500 and the one that found it", n)
	}

	// After the first 500, a 500 is the transport's to retry: here its backoff is beyond the
	// deadline, so the second 500 ends the confirmation with the registry's error.
	for range 2 {
		reg.Inject(testenv.RegistryServerError().On("/manifests/v1"))
	}
	before = countPaths(reg, "/manifests/v1")
	_, err = s.Confirm(context.Background(), "v1")
	wantError(t, err, v1.ReadOperationFailedReason, "500 Internal Server Error")
	if n := countPaths(reg, "/manifests/v1") - before; n != 2 {
		t.Errorf("%d HEADs of v1 for two 500s, want 2", n)
	}
}

// TestIntegrationConfirmHonoursRetryAfter: the first HEAD of a confirmation, whose server errors
// Confirm retries itself, still waits out a 429's Retry-After in the transport.
func TestIntegrationConfirmHonoursRetryAfter(t *testing.T) {
	reg := testenv.NewRegistry(t)
	want := reg.Push(t, "app", "v1")
	s, err := fast().Prepare(context.Background(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	reg.Inject(testenv.RegistryTooManyRequests("1").On("/manifests/v1"))
	got, err := s.Confirm(context.Background(), "v1")
	if err != nil || got != want {
		t.Fatalf("Confirm(v1) after a 429 = %s, %v; want %s", got, err, want)
	}
	if n := countPaths(reg, "/manifests/v1"); n != 2 {
		t.Errorf("%d HEADs of v1, want 2: the 429 and the retry after it", n)
	}
}

// TestIntegrationConfirmOfAFailingRegistryIsBounded: a registry that answers every HEAD 500
// costs a confirmation its first HEAD, which Confirm asks again once, and that HEAD with the
// transport's retries: DefaultMaxRetries+2 requests.
func TestIntegrationConfirmOfAFailingRegistryIsBounded(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	s, err := fast().Prepare(context.Background(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 * registry.DefaultMaxRetries {
		reg.Inject(testenv.RegistryServerError().On("/manifests/v1"))
	}
	_, err = s.Confirm(context.Background(), "v1")
	wantError(t, err, v1.ReadOperationFailedReason, "500 Internal Server Error")
	if n, want := countPaths(reg, "/manifests/v1"), registry.DefaultMaxRetries+2; n != want {
		t.Errorf("%d HEADs of a tag the registry always fails, want %d", n, want)
	}
}
