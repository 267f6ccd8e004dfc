package preflight

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

const (
	fluxNamespace = "flux-system"
	// fluxVersionLabel is where Flux's install stamps its version on each Deployment.
	fluxVersionLabel = "app.kubernetes.io/version"
	// reflectorController is Flux's controller that reflector replaces.
	reflectorController = "image-reflector-controller"
)

// MinFlux is the oldest Flux that works beside reflector: 2.7 made image.toolkit.fluxcd.io/v1
// the version image-automation-controller reads and the CRDs store.
var MinFlux = version.MustParseGeneric("2.7.0")

// FluxVersion checks the version of Flux in flux-system, read from its Deployments' labels. No
// Flux passes: reflector serves the API without it.
func FluxVersion(ds []appsv1.Deployment) Result {
	const name = "Flux"
	var oldest *version.Version
	var label string
	found := false
	for _, d := range ds {
		if d.Namespace != fluxNamespace {
			continue
		}
		found = true
		l := d.Labels[fluxVersionLabel]
		v, err := version.ParseGeneric(l)
		if err != nil {
			continue
		}
		if oldest == nil || v.LessThan(oldest) {
			oldest, label = v, l
		}
	}
	switch {
	case !found:
		return pass(name, "not installed in "+fluxNamespace+": reflector serves the API without it")
	case oldest == nil:
		return fail(name, "the Deployments of "+fluxNamespace+" carry no "+fluxVersionLabel+" label", "flux version")
	case oldest.LessThan(MinFlux):
		return fail(name, fmt.Sprintf("%s is older than %s, which reads image.toolkit.fluxcd.io/v1", label, minorOf(MinFlux)),
			"# with a flux CLI of "+minorOf(MinFlux)+" or later, run your bootstrap command again, or:\n"+
				"flux install --components-extra=image-automation-controller")
	}
	return pass(name, label+" in "+fluxNamespace)
}

// ImageReflectorController checks that Flux's own image-reflector-controller does not run: both
// would reconcile the same objects.
func ImageReflectorController(ds []appsv1.Deployment) Result {
	const name = "Flux image-reflector-controller"
	for _, d := range ds {
		if d.Namespace != fluxNamespace || d.Name != reflectorController {
			continue
		}
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		if replicas > 0 {
			return fail(name, fmt.Sprintf("runs (%d replicas): it and reflector would both reconcile every ImageRepository and ImagePolicy", replicas),
				"# leave it out of Flux's components, so that Flux neither runs it nor applies its CRDs:\n"+
					"flux install --components-extra=image-automation-controller   # or your flux bootstrap command with the same flag\n"+
					"# or, for now:\n"+
					"kubectl -n "+fluxNamespace+" scale deployment "+reflectorController+" --replicas=0")
		}
		return pass(name, "scaled to zero")
	}
	return pass(name, "not installed")
}
