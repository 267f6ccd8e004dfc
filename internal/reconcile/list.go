package reconcile

import (
	"context"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// StoreKey returns the tag store key of an ImageRepository: its namespace/name identity, so
// that two repositories of one image with different credentials or exclusions never share tags.
func StoreKey(namespace, name string) string {
	return namespace + "/" + name
}

// listRepositories pages through every ImageRepository of the cluster.
func (p *Pass) listRepositories(ctx context.Context, each func(*v1.ImageRepository)) error {
	return p.Kube.Repositories.Pages(ctx, "", p.listOptions(), func(l *v1.ImageRepositoryList) error {
		for i := range l.Items {
			each(&l.Items[i])
		}
		return nil
	})
}

// listPolicies pages through every ImagePolicy of the cluster.
func (p *Pass) listPolicies(ctx context.Context, each func(*v1.ImagePolicy)) error {
	return p.Kube.Policies.Pages(ctx, "", p.listOptions(), func(l *v1.ImagePolicyList) error {
		for i := range l.Items {
			each(&l.Items[i])
		}
		return nil
	})
}
