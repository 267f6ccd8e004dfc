package reconcile

import (
	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// CachedRepositories holds ImageRepositories as a watch delivers them (kube.Cache): the copies
// of the apiserver's watch cache, without a request. ok is false when it cannot answer yet.
type CachedRepositories interface {
	Get(namespace, name string) (repo *v1.ImageRepository, ok bool)
}

// CachedPolicies holds ImagePolicies as a watch delivers them (kube.Cache), indexed by
// RepositoryIndex. ok is false when it cannot answer yet.
type CachedPolicies interface {
	Indexed(index, value string) (pols []*v1.ImagePolicy, ok bool)
}

// RepositoryIndex is the index of CachedPolicies that finds the ImagePolicies referring to a
// repository by its StoreKey (PolicyRepository).
const RepositoryIndex = "repository"

// PolicyRepository is the value of pol under RepositoryIndex: the StoreKey of the
// ImageRepository it refers to.
func PolicyRepository(pol *v1.ImagePolicy) string {
	return StoreKey(pol.RepositoryNamespace(), pol.Spec.ImageRepositoryRef.Name)
}
