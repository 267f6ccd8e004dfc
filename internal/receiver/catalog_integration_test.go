package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"golang.org/x/time/rate"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestWebhookIntegrationMatchesFromCopies: deliveries are matched against the watched copies of
// the ImageRepositories, without a listing; a repository created since is still found, because
// a delivery that matches nothing lists consistently; one deleted since is dropped when its
// annotation finds it gone.
func TestWebhookIntegrationMatchesFromCopies(t *testing.T) {
	env := testenv.Kube(t)
	repos := kube.NewCache[*v1.ImageRepository](env.Client(t).Repositories, nil)
	f := newFixture(t, receiver.WithRepositories(repos), receiver.WithRateLimit(rate.Inf, 0))
	repos.Start(t.Context())
	t.Cleanup(repos.Stop)
	ns := f.namespace(t, token)
	f.reg.Push(t, "catalog/a", "1.0.0")
	f.reg.Push(t, "catalog/b", "1.0.0")
	f.createRepo(t, ns, "a", f.reg.Image("catalog/a"))
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, ok := repos.Get(ns, "a"); !ok {
			return errors.New("the copies do not hold the repository yet")
		}
		return nil
	})
	hook := func(id, repo string) (int, receiver.Answer) {
		t.Helper()
		body := fmt.Appendf(nil, `{"events":[{"id":%q,"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":%q,"tag":"1.0.0"},"request":{"host":%q}}]}`,
			id, repo, f.reg.Host())
		return f.send(t, signed("distribution", "/hook/distribution/"+ns, token, body))
	}

	before := f.lists.Load()
	for i := range 20 {
		if code, a := hook(fmt.Sprintf("a-%d", i), "catalog/a"); code != http.StatusAccepted || len(a.Objects) != 1 {
			t.Fatalf("delivery %d: %d %+v", i, code, a)
		}
	}
	if n := f.lists.Load() - before; n != 0 {
		t.Errorf("%d listings for 20 deliveries matched by the copies, want 0", n)
	}

	f.createRepo(t, ns, "b", f.reg.Image("catalog/b"))
	code, a := hook("b-1", "catalog/b")
	if code != http.StatusAccepted || len(a.Objects) != 1 || a.Objects[0].Name != "b" {
		t.Errorf("a repository created a moment before its delivery: %d %+v", code, a)
	}

	if err := f.kube.Repositories.Delete(context.Background(), ns, "a"); err != nil {
		t.Fatal(err)
	}
	code, a = hook("a-gone", "catalog/a")
	if code != http.StatusOK || len(a.Objects) != 0 {
		t.Errorf("a repository deleted after the copies saw it: %d %+v, want 200 and no objects", code, a)
	}
}
