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
	cont := ""
	for {
		list, err := p.Kube.Repositories.List(ctx, "", p.listOptions(cont))
		if err != nil {
			return err
		}
		for i := range list.Items {
			each(&list.Items[i])
		}
		if cont = list.Continue; cont == "" {
			return nil
		}
	}
}

// listPolicies pages through every ImagePolicy of the cluster.
func (p *Pass) listPolicies(ctx context.Context, each func(*v1.ImagePolicy)) error {
	cont := ""
	for {
		list, err := p.Kube.Policies.List(ctx, "", p.listOptions(cont))
		if err != nil {
			return err
		}
		for i := range list.Items {
			each(&list.Items[i])
		}
		if cont = list.Continue; cont == "" {
			return nil
		}
	}
}
