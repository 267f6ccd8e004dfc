package receiver

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
)

// repoEntry is what matching needs of one ImageRepository.
type repoEntry struct {
	namespace, name string
	// key is the image's match key; empty when spec.image is invalid.
	key       string
	suspended bool
	timeout   time.Duration
}

// catalog finds the ImageRepositories a delivery may match: in the watched copies
// (reconcile.CachedRepositories) once they can answer, else, and when nothing in them matches
// (find with fresh), in a consistent listing, so that a repository created a moment ago is never
// missed for that reason. The staleness left is a repository created with an image that an older
// one in scope already has (the cron reconciler scans it as never scanned) and one deleted since
// (its annotation finds it gone and it is dropped).
type catalog struct {
	kube *kube.Client
	// watched, when set, holds the copies; without it every delivery lists.
	watched  reconcile.CachedRepositories
	pageSize int64
}

func newCatalog(c *kube.Client, watched reconcile.CachedRepositories, pageSize int64) *catalog {
	return &catalog{kube: c, watched: watched, pageSize: pageSize}
}

// find returns the ImageRepositories of namespace ("" for all): the watched copies unless fresh
// or they cannot answer yet, else a consistent listing. copies tells that they came from the
// copies, which may miss a repository created a moment ago.
func (c *catalog) find(ctx context.Context, namespace string, fresh bool) (repos []repoEntry, copies bool, err error) {
	if !fresh && c.watched != nil && c.watched.Range(namespace, func(repo *v1.ImageRepository) {
		repos = append(repos, newRepoEntry(repo))
	}) {
		return repos, true, nil
	}
	err = c.kube.Repositories.Pages(ctx, namespace, metav1.ListOptions{Limit: c.pageSize}, func(page *v1.ImageRepositoryList) error {
		for i := range page.Items {
			repos = append(repos, newRepoEntry(&page.Items[i]))
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("listing ImageRepositories: %w", err)
	}
	return repos, false, nil
}

// newRepoEntry keeps what matching needs of repo.
func newRepoEntry(repo *v1.ImageRepository) repoEntry {
	e := repoEntry{namespace: repo.Namespace, name: repo.Name, suspended: repo.Spec.Suspend, timeout: repo.GetTimeout()}
	if key, err := imagename.KeyOf(repo.Spec.Image); err == nil {
		e.key = key
	}
	return e
}
