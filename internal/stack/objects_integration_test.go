package stack_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

const objectManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: objects
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: objects
spec:
  imageRepositoryRef:
    name: objects
  policy:
    semver:
      range: ^1.x
`

// TestObjectEventsIntegration checks that changes to the objects themselves reach the
// functions through Knative's ApiServerSource receive adapter, as on Knative: a spec edit of an
// ImagePolicy, a spec edit of an ImageRepository, and a delete. The cron reconciler's period is
// an hour and the objects' interval too, so nothing else can explain the outcomes.
func TestObjectEventsIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: time.Hour})
	image := s.Registry + "/objects/app"
	for _, tag := range []string{"1.0.0", "1.1.0", "2.0.0"} {
		if _, err := stack.Push(image + ":" + tag); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(objectManifests, image))); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "objects", "1.1.0")

	t.Run("every process listens on loopback only", func(t *testing.T) {
		for _, c := range stack.Components() {
			pid := s.PID(c)
			if pid == 0 {
				t.Errorf("%s is not running", c)
				continue
			}
			addrs, err := testenv.Listeners(pid)
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			if len(addrs) == 0 {
				t.Errorf("%s listens nowhere: the check reads nothing", c)
			}
			if bad := testenv.NonLoopback(addrs); len(bad) > 0 {
				t.Errorf("%s listens on %v, outside 127.0.0.1", c, bad)
			}
		}
		exposed, err := s.Env.ExposedListeners()
		if err != nil {
			t.Fatal(err)
		}
		for proc, addrs := range exposed {
			t.Errorf("%s listens on %v, outside 127.0.0.1", proc, addrs)
		}
	})

	timed := func(what string, check func() error) {
		t.Helper()
		start := time.Now()
		testenv.Eventually(t, 20*time.Second, check)
		t.Logf("%s: %s", what, time.Since(start).Round(time.Millisecond))
	}

	t.Run("an ImagePolicy's new range", func(t *testing.T) {
		if _, err := s.Kube.Policies.Patch(ctx, "default", "objects", types.MergePatchType,
			[]byte(`{"spec":{"policy":{"semver":{"range":">=2.0.0"}}}}`)); err != nil {
			t.Fatal(err)
		}
		timed("policy edit to latestRef", func() error {
			p, err := s.Kube.Policies.Get(ctx, "default", "objects")
			if err != nil {
				return err
			}
			if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "2.0.0" {
				return fmt.Errorf("latestRef %v, want 2.0.0", p.Status.LatestRef)
			}
			return nil
		})
	})

	t.Run("an ImageRepository's new exclusion list", func(t *testing.T) {
		if _, err := s.Kube.Repositories.Patch(ctx, "default", "objects", types.MergePatchType,
			[]byte(`{"spec":{"exclusionList":["^2\\."]}}`)); err != nil {
			t.Fatal(err)
		}
		timed("repository edit to a new scan", func() error {
			r, err := s.Kube.Repositories.Get(ctx, "default", "objects")
			if err != nil {
				return err
			}
			if r.Status.ObservedGeneration != r.Generation || r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != 2 {
				return fmt.Errorf("observed generation %d of %d, last scan %+v; want 2 tags", r.Status.ObservedGeneration, r.Generation, r.Status.LastScanResult)
			}
			return nil
		})
	})

	t.Run("a deleted ImageRepository", func(t *testing.T) {
		before := policyTag(t, s, "default", "objects")
		if err := s.Kube.Repositories.Delete(ctx, "default", "objects"); err != nil {
			t.Fatal(err)
		}
		st := store.New(s.StoreDir(), store.ReadOnly())
		defer st.Close()
		timed("delete to store entry gone", func() error {
			keys, err := st.Keys(ctx)
			if err == nil && slices.Contains(keys, "default/objects") {
				err = fmt.Errorf("the store still holds default/objects: %v; logs in %s", keys, s.Log(stack.Scan))
			}
			return err
		})
		// Its policy hears of it, as Flux's does: not Ready, latestRef kept.
		testenv.Eventually(t, 30*time.Second, func() error {
			pol, err := s.Kube.Policies.Get(ctx, "default", "objects")
			if err != nil {
				return err
			}
			ready := apimeta.FindStatusCondition(pol.Status.Conditions, v1.ReadyCondition)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1.DependencyNotReadyReason {
				return fmt.Errorf("the policy of the deleted repository: Ready %+v; logs in %s and %s", ready, s.Log(stack.Scan), s.Log(stack.Policy))
			}
			if tag := refTag(pol.Status.LatestRef); tag != before {
				return fmt.Errorf("latestRef %q after the deletion, want it kept at %q", tag, before)
			}
			return nil
		})
	})
}
