package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

const manifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: app
spec:
  image: %[1]s
  interval: 5s
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: stable
spec:
  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: ^1.x
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: preview
spec:
  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: '>=1.3.0-0'
`

// TestEndToEndIntegration runs the whole system as separate processes, as `make run` does, and
// follows pushes to the registry through its notifications, the scan function, the store and
// the policy function into the ImagePolicies' status, also across a stopped scan function and a
// killed policy function.
func TestEndToEndIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: 2 * time.Second, NotifyBackoff: 200 * time.Millisecond})
	image := s.Registry + "/e2e/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(manifests, image))); err != nil {
		t.Fatal(err)
	}
	push := func(tag string) {
		t.Helper()
		if _, err := stack.Push(image + ":" + tag); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(policy, want string) {
		t.Helper()
		waitLatest(t, s, policy, want)
	}

	push("1.2.0")
	wait("stable", "1.2.0")
	push("1.3.0-rc.1")
	wait("preview", "1.3.0-rc.1")
	wait("stable", "1.2.0")
	push("1.3.0")
	wait("stable", "1.3.0")
	wait("preview", "1.3.0")

	t.Run("a forged webhook changes nothing", func(t *testing.T) {
		before, err := s.Kube.Repositories.Get(ctx, "default", "app")
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"events":[{"id":"forged","action":"push","target":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","repository":"e2e/app","tag":"9.9.9","digest":"sha256:%064d"},"request":{"host":%q}}]}`, 0, s.Registry)
		req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/distribution/default", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
		req.Header.Set("Authorization", "Bearer not-the-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("forged webhook answered %d, want 401", resp.StatusCode)
		}
		after, err := s.Kube.Repositories.Get(ctx, "default", "app")
		if err != nil {
			t.Fatal(err)
		}
		if after.Annotations[v1.ReconcileRequestAnnotation] != before.Annotations[v1.ReconcileRequestAnnotation] {
			t.Error("a forged webhook set the reconcile annotation")
		}
	})

	t.Run("the cron reconciler delivers a push the scan function missed", func(t *testing.T) {
		if err := s.Kill(stack.Scan, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		push("1.4.0")
		// The registry holds undelivered notifications in memory: a crash loses them, so only
		// the cron reconciler can bring 1.4.0 in.
		if err := s.Kill(stack.Registry, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(ctx, stack.Registry); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(ctx, stack.Scan); err != nil {
			t.Fatal(err)
		}
		wait("stable", "1.4.0")
	})

	t.Run("a policy function killed mid-flight does not leave a wrong latestRef", func(t *testing.T) {
		push("1.5.0")
		if err := s.Kill(stack.Policy, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(ctx, stack.Policy); err != nil {
			t.Fatal(err)
		}
		wait("stable", "1.5.0")
		wait("preview", "1.5.0")
	})

	t.Run("the store forgets a deleted ImageRepository", func(t *testing.T) {
		// The process that finds the object gone deletes its entry: the scan function, which
		// the ApiServerSource's delete event tells at once, as on Knative; the cron
		// reconciler's store round (every ten minutes) sweeps any entry that it missed.
		if err := s.Kube.Repositories.Delete(ctx, "default", "app"); err != nil {
			t.Fatal(err)
		}
		st := store.New(s.StoreDir(), store.ReadOnly())
		defer st.Close()
		testenv.Eventually(t, 30*time.Second, func() error {
			keys, err := st.Keys(ctx)
			if err == nil && slices.Contains(keys, "default/app") {
				err = fmt.Errorf("the store still holds default/app: %v", keys)
			}
			return err
		})
	})

	t.Run("objects Flux's controller left behind are deleted within a cron period or so", func(t *testing.T) {
		if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(legacy, image))); err != nil {
			t.Fatal(err)
		}
		wait("legacy", "1.5.0")
		start := time.Now()
		if err := s.Kube.Policies.Delete(ctx, "default", "legacy"); err != nil {
			t.Fatal(err)
		}
		if err := s.Kube.Repositories.Delete(ctx, "default", "legacy"); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			_, perr := s.Kube.Policies.Get(ctx, "default", "legacy")
			_, rerr := s.Kube.Repositories.Get(ctx, "default", "legacy")
			if apierrors.IsNotFound(perr) && apierrors.IsNotFound(rerr) {
				return nil
			}
			return fmt.Errorf("still there: policy %v, repository %v; logs in %s", perr, rerr, s.Log(stack.Cron))
		})
		t.Logf("deleted %s after the request, with a cron period of 2s", time.Since(start).Round(100*time.Millisecond))
	})
}

// legacy are objects as Flux's image-reflector-controller leaves them: holding its finalizer.
const legacy = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: legacy
  finalizers: [finalizers.fluxcd.io]
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: legacy
  finalizers: [finalizers.fluxcd.io]
spec:
  imageRepositoryRef:
    name: legacy
  policy:
    semver:
      range: ^1.x
`
