package kube_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newRepo(t *testing.T) (*kube.Client, string) {
	t.Helper()
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	_, err := c.Repositories.Create(context.Background(), &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec:       v1.ImageRepositorySpec{Image: "ghcr.io/org/app", Interval: metav1.Duration{Duration: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, ns
}

// A burst of annotations must not keep a status write from landing: every guarded write would
// lose the race to the next annotation.
func TestUpdateStatusIntegrationSurvivesAnnotationChurn(t *testing.T) {
	c, ns := newRepo(t)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var annotations atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Repositories.RequestReconcile(ctx, ns, "app", testenv.RequestToken(time.Now())); err == nil {
					annotations.Add(1)
				}
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if annotations.Load() == 0 {
			return errors.New("no annotation written yet")
		}
		return nil
	})
	for i := range 5 {
		name := fmt.Sprintf("write-%d", i)
		got, err := c.Repositories.UpdateStatus(ctx, ns, "app", func(r *v1.ImageRepository) error {
			r.Status.CanonicalImageName = name
			return nil
		})
		if err != nil {
			t.Fatalf("status write %d under churn: %v", i, err)
		}
		if got.Status.CanonicalImageName != name {
			t.Fatalf("status write %d: got %q", i, got.Status.CanonicalImageName)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d annotations during 5 status writes", annotations.Load())
}

// A status written by someone else between the read and the write is not overwritten: the retry
// is guarded again and starts from the new status.
func TestUpdateStatusIntegrationKeepsAConcurrentStatusWrite(t *testing.T) {
	c, ns := newRepo(t)
	ctx := context.Background()
	calls := 0
	got, err := c.Repositories.UpdateStatus(ctx, ns, "app", func(r *v1.ImageRepository) error {
		calls++
		if calls == 1 {
			// Another writer changes the status and the metadata before this write lands.
			if _, err := c.Repositories.RequestReconcile(ctx, ns, "app", "other"); err != nil {
				return err
			}
			if _, err := c.Repositories.UpdateStatus(ctx, ns, "app", func(o *v1.ImageRepository) error {
				o.Status.LastHandledReconcileAt = "other"
				o.Status.CanonicalImageName = "theirs"
				return nil
			}); err != nil {
				return err
			}
		}
		if calls == 2 && r.Status.CanonicalImageName != "theirs" {
			t.Errorf("the retry did not read the other write: %q", r.Status.CanonicalImageName)
		}
		r.Status.ObservedGeneration = r.Generation
		r.Status.CanonicalImageName = "ours"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("mutate ran %d times, want 2", calls)
	}
	if got.Status.CanonicalImageName != "ours" || got.Status.LastHandledReconcileAt != "other" {
		t.Errorf("status %+v: want our name and their lastHandledReconcileAt", got.Status)
	}
}
