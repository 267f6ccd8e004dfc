package stack_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

const repairManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: repair
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: repair
spec:
  imageRepositoryRef:
    name: repair
  policy:
    semver:
      range: ^1.x
`

// TestStoppedPolicyFunctionRepairedByCronIntegration stops the policy function while a push's
// scan announces its tags with their delta: the announcement is lost, and nothing but the cron
// reconciler, which finds the policy's evaluated revision behind its repository's, brings the
// policy to the pushed tag once the function is back. The repaired status records the revision
// it evaluated, so that the next push advances the policy by its delta again, without a read of
// the tag store.
func TestStoppedPolicyFunctionRepairedByCronIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: 2 * time.Second})
	reg := testenv.NewRegistry(t)
	image := reg.Image("repair/app")
	reg.Push(t, "repair/app", "1.0.0")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(repairManifests, image))); err != nil {
		t.Fatal(err)
	}
	waitTag(t, s, "repair", "1.0.0")
	push := func(tag string) {
		t.Helper()
		reg.Push(t, "repair/app", tag)
		// As a registry's webhook announces a push; the in-process registry notifies nobody.
		post(t, s, image, "repair/app", tag)
	}
	push("1.1.0")
	waitTag(t, s, "repair", "1.1.0")

	if err := s.Kill(stack.Policy, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	push("1.2.0")
	// The scan stored 1.2.0 and recorded it; its announcement found nobody.
	testenv.Eventually(t, 30*time.Second, func() error {
		r, err := s.Kube.Repositories.Get(ctx, "default", "repair")
		if err != nil {
			return err
		}
		if r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != 3 {
			return fmt.Errorf("ImageRepository repair holds %+v, want 3 tags", r.Status.LastScanResult)
		}
		return nil
	})
	if p, err := s.Kube.Policies.Get(ctx, "default", "repair"); err != nil {
		t.Fatal(err)
	} else if refTag(p.Status.LatestRef) != "1.1.0" {
		t.Fatalf("with the policy function stopped, latestRef is %s, want 1.1.0", refTag(p.Status.LatestRef))
	}
	if err := s.Restart(ctx, stack.Policy); err != nil {
		t.Fatal(err)
	}
	waitTag(t, s, "repair", "1.2.0")
	// The function logs a request once its handler returned, after the status write that the
	// wait above saw; the cron reconciler sends no other request for a policy that is current.
	err := testenv.Poll(ctx, 10*time.Second, 100*time.Millisecond, func() error {
		if handled(t, s, events.TypePolicyRequested, "default/repair") == 0 {
			return fmt.Errorf("no request of the cron reconciler in %s", s.Log(stack.Policy))
		}
		return nil
	})
	if err != nil {
		t.Errorf("latestRef 1.2.0 came without a request of the cron reconciler: %v", err)
	}

	calls := policyStoreCalls(t, s)
	push("1.3.0")
	waitTag(t, s, "repair", "1.3.0")
	if after := policyStoreCalls(t, s); after != calls {
		t.Errorf("the push after the repair cost the policy function %v store calls, want none: it advances by the delta", after-calls)
	}
}

// post sends the scan function a distribution notification of a push of repo:tag in image's
// registry and requires 202.
func post(t *testing.T, s *stack.Stack, image, repo, tag string) {
	t.Helper()
	host := image[:len(image)-len(repo)-1]
	body := fmt.Sprintf(`{"events":[{"id":%q,"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":%q,"tag":%q},"request":{"host":%q}}]}`,
		"repair-"+tag, repo, tag, host)
	if a := postWebhook(t, s, body, "Bearer "+s.Token, ""); a.status != 202 {
		t.Fatalf("webhook answered %d", a.status)
	}
}

// handled counts the policy function's log lines of events of type typ about subject that it
// handled.
func handled(t *testing.T, s *stack.Stack, typ, subject string) int {
	t.Helper()
	n := 0
	readLog(t, s.Log(stack.Policy), func(line map[string]any) {
		if line["msg"] == "event handled" && line["type"] == typ && line["subject"] == subject {
			n++
		}
	})
	return n
}

// policyStoreCalls is the policy function's count of tag store calls
// (reflector_store_lock_wait_seconds, whose every call waits once).
func policyStoreCalls(t *testing.T, s *stack.Stack) float64 {
	t.Helper()
	n, _ := testenv.Scrape(t, s.Metrics[stack.Policy]).Value("reflector_store_lock_wait_seconds", nil)
	return n
}
