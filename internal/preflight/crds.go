package preflight

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/imagereflector/reflector/internal/kube"
)

// The CRDs of the API reflector serves.
const (
	RepositoryCRD = "imagerepositories.image.toolkit.fluxcd.io"
	PolicyCRD     = kube.ImagePolicyCRD
)

// StoredVersions checks that the CRD name stores its objects as v1 only: reflector's CRDs serve
// v1 alone, and the apiserver refuses to apply them over a CRD whose status.storedVersions
// still lists a version (v1beta1, v1beta2) that Flux before 2.7 stored. A missing CRD passes:
// the install creates it.
func StoredVersions(name string, crd *unstructured.Unstructured) Result {
	check := "CRD " + name
	if crd == nil {
		return pass(check, "not installed yet: the install creates it")
	}
	stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
	old := slices.DeleteFunc(slices.Clone(stored), func(v string) bool { return v == "v1" })
	if len(old) == 0 {
		return pass(check, "stored as v1")
	}
	plural := strings.SplitN(name, ".", 2)[0]
	return fail(check, fmt.Sprintf("status.storedVersions lists %s: objects may still be stored at those versions, and reflector's CRD (v1 only) is refused", strings.Join(old, ", ")),
		"# with Flux 2.7 or later installed, so that v1 is the storage version:\n"+
			"kubectl get "+plural+" -A -o json | kubectl replace -f -\n"+
			"kubectl patch crd "+name+` --subresource=status --type=merge -p '{"status":{"storedVersions":["v1"]}}'`)
}

// PolicySchema checks that the served ImagePolicy CRD declares spec.verify, as reflector's
// does. Flux's does not: the apiserver then prunes spec.verify from every policy, and a policy
// that asked for signed images selects unsigned ones without a word. A missing CRD passes.
func PolicySchema(crd *unstructured.Unstructured) Result {
	const name = "ImagePolicy schema"
	if crd == nil {
		return pass(name, "not installed yet: the install applies reflector's")
	}
	if kube.ServesVerify(crd.Object) {
		return pass(name, "reflector's: spec.verify is served")
	}
	return fail(name, "the served CRD has no spec.verify (Flux's): the apiserver drops the signature requirement of every ImagePolicy",
		"kubectl apply --server-side --force-conflicts -f crds.yaml   # reflector's CRDs: a release's crds.yaml, or config/crd/bases/\n"+
			"# and keep Flux from applying its own: install Flux without image-reflector-controller, e.g.\n"+
			"flux install --components-extra=image-automation-controller")
}
