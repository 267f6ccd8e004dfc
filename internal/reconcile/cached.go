package reconcile

import (
	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// CachedRepositories holds ImageRepositories as a watch delivers them (kube.Cache): the copies
// of the apiserver's watch cache, without a request. It is how the functions read them: the
// scans beside their requests' patches (Scanner.Repositories), the evaluations of a push's delta
// (Evaluator.Repositories) and the matching of webhook deliveries (receiver.WithRepositories);
// a miss, which may be an object created a moment ago, is read from the apiserver. Get returns
// a copy the caller may change; Range calls each with every repository of namespace ("" for
// all) as held, which each must neither change nor keep. ok is false when it cannot answer yet.
type CachedRepositories interface {
	Get(namespace, name string) (repo *v1.ImageRepository, ok bool)
	Range(namespace string, each func(*v1.ImageRepository)) (ok bool)
}

// CachedPolicies holds ImagePolicies as a watch delivers them (kube.Cache), indexed by
// RepositoryIndex: how the policy function finds the policies of a repository whose tags
// changed (Evaluator.Policies); a miss is listed consistently. Indexed returns copies the caller
// may change; ok is false when it cannot answer yet.
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
