// Package preflight checks that a cluster can run reflector, as `flux check --pre` does for
// Flux: the Kubernetes version, Knative Serving and Eventing with the features reflector needs,
// a networking layer and a broker class, a StorageClass for the tag store, the CRDs' stored
// versions, Flux beside it, and the public webhook route. Each check is a function of what
// Gather read, so that the decisions are tested as tables; every failure carries the command
// that fixes it.
package preflight

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/version"
)

// Result is the outcome of one check.
type Result struct {
	// Name says what was checked, e.g. "Knative Serving".
	Name string
	// OK is true when the check passed.
	OK bool
	// Message says what was found.
	Message string
	// Fix is the command, or commands one a line, that fix a failure; empty when OK.
	Fix string
}

func pass(name, message string) Result { return Result{Name: name, OK: true, Message: message} }

func fail(name, message, fix string) Result {
	return Result{Name: name, Message: message, Fix: fix}
}

// Cluster is what the checks read from a cluster; Gather fills it. A nil or missing entry means
// that the object does not exist.
type Cluster struct {
	// Version is the apiserver's version.
	Version *version.Info
	// CRDs are the CustomResourceDefinitions the checks look at, by name.
	CRDs map[string]*unstructured.Unstructured
	// ConfigMaps are Knative's configuration, by "namespace/name".
	ConfigMaps map[string]*corev1.ConfigMap
	// Deployments are the cluster's Deployments, of every namespace.
	Deployments []appsv1.Deployment
	// StorageClasses are the cluster's StorageClasses.
	StorageClasses []storagev1.StorageClass
	// StoreClaim is the tag store's PersistentVolumeClaim, once reflector is installed.
	StoreClaim *corev1.PersistentVolumeClaim
	// Broker is reflector's Broker, once reflector is installed.
	Broker *unstructured.Unstructured
	// WebhookService is the Knative Service of the public webhook route, once reflector is
	// installed.
	WebhookService *unstructured.Unstructured
}

// Options choose what Run checks.
type Options struct {
	// Pre checks only the prerequisites, before reflector is installed: the broker, the tag
	// store's claim and the webhook route are left out.
	Pre bool
	// Probe asks the webhook route's URL; nil leaves the request out and checks its scheme only.
	Probe Prober
	// AllowHTTP accepts a webhook route of plain http, which only registries inside a private
	// network can use.
	AllowHTTP bool
}

// Run runs every check on c, in the order a user fixes them.
func Run(ctx context.Context, c *Cluster, opts Options) []Result {
	out := []Result{
		KubernetesVersion(c.Version),
		KnativeServing(c),
		ServingFeatures(c.ConfigMaps[servingNamespace+"/config-features"]),
		Networking(c),
		KnativeEventing(c),
		EventingOIDC(c.ConfigMaps[eventingNamespace+"/config-features"]),
		BrokerClass(c, opts.Pre),
		Storage(c.StorageClasses, c.StoreClaim),
	}
	for _, name := range []string{RepositoryCRD, PolicyCRD} {
		out = append(out, StoredVersions(name, c.CRDs[name]))
	}
	out = append(out, PolicySchema(c.CRDs[PolicyCRD]), FluxVersion(c.Deployments), ImageReflectorController(c.Deployments))
	if !opts.Pre {
		out = append(out, WebhookRoute(ctx, c.WebhookService, opts.Probe, opts.AllowHTTP))
	}
	return out
}

// Failed tells whether any result failed.
func Failed(results []Result) bool {
	for _, r := range results {
		if !r.OK {
			return true
		}
	}
	return false
}
