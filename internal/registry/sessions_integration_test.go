package registry_test

import (
	"context"
	"testing"
	"time"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

// Scans of one repository with the same credentials share a session: the registry is pinged
// once, not at every push. New credentials, and a failure that may be the session's, open a new
// one; a missing tag does not.
func TestIntegrationScansReuseTheRepositorysSession(t *testing.T) {
	ctx := context.Background()
	reg := testenv.NewRegistry(t, testenv.RegistryBasicAuth("robot", "s3cret"))
	reg.Push(t, "app", "v1")
	kc, ns := apiserver(t)
	createSecret(t, kc, ns+"/pull", "kubernetes.io/dockerconfigjson", dockerConfig(reg.Host(), "robot", "s3cret"))
	obj := imageRepository(ns, reg.Image("app"), func(o *v1.ImageRepository) { o.Spec.SecretRef = &v1.LocalObjectReference{Name: "pull"} })
	// No retries: one injected fault fails one request.
	c := fast(registry.WithRetries(0, time.Millisecond, time.Millisecond))
	head := func(tag string) error {
		t.Helper()
		s, err := c.Prepare(ctx, kc, obj)
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Head(ctx, tag)
		return err
	}

	for range 3 {
		if err := head("v1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := pings(reg); n != 1 {
		t.Errorf("%d pings for three scans, want 1", n)
	}
	if err := head("v9"); err == nil {
		t.Fatal("HEAD of a missing tag succeeded")
	}
	if err := head("v1"); err != nil {
		t.Fatal(err)
	}
	if n := pings(reg); n != 1 {
		t.Errorf("%d pings after a missing tag, want 1: a 404 is no fault of the session", n)
	}

	// Another repository of the same registry has its own token scope: its own session.
	reg.Push(t, "other", "v1")
	other := imageRepository(ns, reg.Image("other"), func(o *v1.ImageRepository) { o.Spec.SecretRef = &v1.LocalObjectReference{Name: "pull"} })
	s, err := c.Prepare(ctx, kc, other)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if n := pings(reg); n != 2 {
		t.Errorf("%d pings after a scan of another repository, want 2", n)
	}

	// A server error may be the session's: the next scan starts a new one.
	reg.Inject(testenv.RegistryServerError().On("/manifests/"))
	if err := head("v1"); err == nil {
		t.Fatal("HEAD through a failing registry succeeded")
	}
	if err := head("v1"); err != nil {
		t.Fatal(err)
	}
	if n := pings(reg); n != 3 {
		t.Errorf("%d pings after a server error, want 3", n)
	}

	// Changed credentials never ride on the old session: a wrong password is refused at once.
	sec, err := kc.Secrets.Get(ctx, ns, "pull")
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = dockerConfig(reg.Host(), "robot", "wrong")
	if _, err := kc.Secrets.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	err = head("v1")
	wantError(t, err, v1.AuthenticationFailedReason)
	if n := pings(reg); n != 4 {
		t.Errorf("%d pings after the credentials changed, want 4", n)
	}
}

// WithSessionTTL(0) pings at every scan.
func TestIntegrationSessionsCanBeTurnedOff(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1")
	c := fast(registry.WithSessionTTL(0))
	for range 2 {
		s, err := c.Prepare(context.Background(), nil, imageRepository("default", reg.Image("app")))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if n := pings(reg); n != 2 {
		t.Errorf("%d pings, want 2", n)
	}
}
