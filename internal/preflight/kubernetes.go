package preflight

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
	apiversion "k8s.io/apimachinery/pkg/version"
)

// MinKubernetes is the oldest Kubernetes reflector runs on: the ImagePolicy CRD's selectable
// field spec.imageRepositoryRef.name is generally available from 1.32 (the policy function
// lists a repository's policies by it), and the admission-policy component's
// ValidatingAdmissionPolicy v1 from 1.30.
var MinKubernetes = version.MustParseGeneric("1.32.0")

// KubernetesVersion checks the apiserver's version against MinKubernetes.
func KubernetesVersion(info *apiversion.Info) Result {
	const name = "Kubernetes"
	fix := "upgrade the control plane to " + minorOf(MinKubernetes) + " or later, e.g.\n" +
		"eksctl upgrade cluster --name <cluster> --version " + minorOf(MinKubernetes) + " --approve\n" +
		"gcloud container clusters upgrade <cluster> --master --cluster-version " + minorOf(MinKubernetes)
	if info == nil {
		return fail(name, "the apiserver did not say its version", fix)
	}
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		return fail(name, fmt.Sprintf("cannot read the version %q: %v", info.GitVersion, err), fix)
	}
	if v.Major() == 0 {
		// A build from a source tree without release tags, as the tests' apiserver is.
		return fail(name, fmt.Sprintf("%s carries no release version: cannot tell whether it is %s or later", info.GitVersion, minorOf(MinKubernetes)), fix)
	}
	if v.LessThan(MinKubernetes) {
		return fail(name, fmt.Sprintf("%s is older than %s (selectable fields of CRDs)", info.GitVersion, minorOf(MinKubernetes)), fix)
	}
	return pass(name, info.GitVersion+" >= "+minorOf(MinKubernetes))
}

func minorOf(v *version.Version) string {
	return fmt.Sprintf("%d.%d", v.Major(), v.Minor())
}
