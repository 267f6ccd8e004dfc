package receiver_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/testenv"
)

// With the ImageRepositories kept as a watch delivers them, a push's delivery is matched and its
// scan starts from those copies: no list and no read of the repository reach the apiserver, only
// the annotation and the status. A repository created after the copies were last seen is still
// found, by the consistent listing of a delivery that matches nothing.
func TestWebhookIntegrationCachedRepositories(t *testing.T) {
	env := testenv.Kube(t)
	repos := kube.NewCache[*v1.ImageRepository](env.Client(t).Repositories, nil)
	f := newFixture(t, receiver.WithRepositories(repos))
	f.scanner.Repositories = repos
	repos.Start(t.Context())
	t.Cleanup(repos.Stop)

	ns := f.namespace(t, token)
	f.reg.Push(t, "cached/app", "1.0.0")
	f.createRepo(t, ns, "app", f.reg.Image("cached/app"))
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, ok := repos.Get(ns, "app"); !ok {
			return errors.New("the copies do not hold the repository yet")
		}
		return nil
	})
	path := "/hook/distribution/" + ns
	deliver := func(id, repo, tag string) {
		t.Helper()
		if code, a := f.send(t, signed("distribution", path, token, distributionPush(id, f.reg.Host(), repo, tag))); code != http.StatusAccepted || len(a.Objects) != 1 {
			t.Fatalf("delivery %s: %d %+v", id, code, a)
		}
	}
	// The first scan lists the tags; the next push is confirmed by itself.
	deliver("first", "cached/app", "1.0.0")
	f.waitTag(t, ns, "app", "1.0.0")
	waitHandled(t, f, ns, "app", f.annotation(t, ns, "app"))

	f.reg.Push(t, "cached/app", "1.1.0")
	lists, reads := f.lists.Load(), f.reads.Load()
	deliver("second", "cached/app", "1.1.0")
	// The test reads through a client of its own, which the fixture's counts leave out.
	own := env.Client(t)
	testenv.Eventually(t, 30*time.Second, func() error {
		r, err := own.Repositories.Get(t.Context(), ns, "app")
		if err != nil {
			return err
		}
		if !hasTag(r, "1.1.0") || r.Status.LastHandledReconcileAt != r.Annotations[v1.ReconcileRequestAnnotation] {
			return fmt.Errorf("the push is not handled yet: %+v", r.Status)
		}
		return nil
	})
	if n := f.lists.Load() - lists; n != 0 {
		t.Errorf("the delivery listed the ImageRepositories %d times, want 0", n)
	}
	if n := f.reads.Load() - reads; n != 0 {
		t.Errorf("the delivery read the ImageRepository %d times, want 0", n)
	}

	// A repository created a moment before its delivery is found, in the copies or by the
	// consistent listing of a delivery that matches nothing in them.
	f.reg.Push(t, "cached/new", "2.0.0")
	f.createRepo(t, ns, "new", f.reg.Image("cached/new"))
	deliver("new", "cached/new", "2.0.0")
	f.waitTag(t, ns, "new", "2.0.0")
}

// hasTag tells whether r's status lists tag among its latest tags.
func hasTag(r *v1.ImageRepository, tag string) bool {
	return r.Status.LastScanResult != nil && slices.Contains(r.Status.LastScanResult.LatestTags, tag)
}
