package preflight

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	servingNamespace  = "knative-serving"
	eventingNamespace = "knative-eventing"

	// KnativeRelease is the Knative release whose Go modules (knative.dev/serving and
	// knative.dev/eventing v0.50.0) the tests run reflector's manifests against; the fixes
	// install it.
	KnativeRelease = "knative-v1.23.0"

	// ServingCRD and BrokerCRD tell that Knative Serving and Eventing are installed.
	ServingCRD = "services.serving.knative.dev"
	BrokerCRD  = "brokers.eventing.knative.dev"
)

// ServingFlags are the Knative Serving features that reflector's functions need
// (docs/install.md, "Feature flags"): the tag store's volume, read-write, the affinity
// that keeps both functions on its node, and the fsGroup that lets user 65532 write it.
var ServingFlags = []string{
	"kubernetes.podspec-persistent-volume-claim",
	"kubernetes.podspec-persistent-volume-write",
	"kubernetes.podspec-affinity",
	"kubernetes.podspec-securitycontext",
}

func releaseURL(repo, file string) string {
	return "https://github.com/knative/" + repo + "/releases/download/" + KnativeRelease + "/" + file
}

// KnativeServing checks that Serving's CRDs are installed and its controller and webhook run.
func KnativeServing(c *Cluster) Result {
	return knativeInstalled(c, knativePart{
		name: "Knative Serving", crd: ServingCRD, namespace: servingNamespace,
		deployments: []string{"controller", "webhook", "activator", "autoscaler"},
		fix: "kubectl apply -f " + releaseURL("serving", "serving-crds.yaml") + "\n" +
			"kubectl apply -f " + releaseURL("serving", "serving-core.yaml"),
	})
}

// KnativeEventing checks that Eventing's CRDs are installed and its controller and webhook run.
func KnativeEventing(c *Cluster) Result {
	return knativeInstalled(c, knativePart{
		name: "Knative Eventing", crd: BrokerCRD, namespace: eventingNamespace,
		deployments: []string{"eventing-controller", "eventing-webhook"},
		fix: "kubectl apply -f " + releaseURL("eventing", "eventing-crds.yaml") + "\n" +
			"kubectl apply -f " + releaseURL("eventing", "eventing-core.yaml") + "\n" +
			"kubectl apply -f " + releaseURL("eventing", "in-memory-channel.yaml") + "\n" +
			"kubectl apply -f " + releaseURL("eventing", "mt-channel-broker.yaml"),
	})
}

// knativePart is one part of Knative as preflight checks it: its CRD crd, its deployments in
// namespace, and fix, the commands that install it.
type knativePart struct {
	name, crd, namespace string
	deployments          []string
	fix                  string
}

// knativeInstalled checks that part's CRD is installed and its deployments are available.
func knativeInstalled(c *Cluster, part knativePart) Result {
	name, crd, namespace, fix := part.name, part.crd, part.namespace, part.fix
	if c.CRDs[crd] == nil {
		return fail(name, "not installed (no CRD "+crd+")", fix)
	}
	var missing []string
	for _, d := range part.deployments {
		if !available(c.Deployments, namespace, d) {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		return fail(name, fmt.Sprintf("not running in %s: %s", namespace, strings.Join(missing, ", ")),
			fmt.Sprintf("kubectl -n %s get deployments,pods   # then see why: kubectl -n %s describe deployment %s\n%s", namespace, namespace, missing[0], fix))
	}
	return pass(name, "installed, running in "+namespace)
}

// ServingFeatures checks that Serving's config-features enables ServingFlags.
func ServingFeatures(cm *corev1.ConfigMap) Result {
	const name = "Knative Serving features"
	var off []string
	for _, f := range ServingFlags {
		if cm == nil || cm.Data[f] != "enabled" {
			off = append(off, f)
		}
	}
	if len(off) == 0 {
		return pass(name, "the volume, affinity and securityContext features are enabled")
	}
	patch := make([]string, len(off))
	for i, f := range off {
		patch[i] = fmt.Sprintf("%q:\"enabled\"", f)
	}
	return fail(name, "not enabled in "+servingNamespace+"/config-features: "+strings.Join(off, ", "),
		"kubectl patch configmap config-features -n "+servingNamespace+" --type merge -p '{\"data\":{"+strings.Join(patch, ",")+"}}'\n"+
			"# with the Knative Operator, set them in the KnativeServing's spec.config.features instead: it reverts the ConfigMap")
}

// EventingOIDC checks Eventing's authentication-oidc feature: the Broker's Triggers prove
// themselves to the functions with it, which refuse every event without.
func EventingOIDC(cm *corev1.ConfigMap) Result {
	const name = "Knative Eventing OIDC"
	if cm != nil && cm.Data["authentication-oidc"] == "enabled" {
		return pass(name, "authentication-oidc is enabled: the Broker proves itself to the functions")
	}
	return fail(name, "authentication-oidc is not enabled in "+eventingNamespace+"/config-features: the functions would refuse every event (401)",
		"kubectl patch configmap config-features -n "+eventingNamespace+" --type merge -p '{\"data\":{\"authentication-oidc\":\"enabled\"}}'\n"+
			"# with the Knative Operator, set it in the KnativeEventing's spec.config.features instead")
}

// ingressControllers are the Deployments that serve each known Knative ingress class.
var ingressControllers = map[string][]string{
	"kourier.ingress.networking.knative.dev":     {"net-kourier-controller", "3scale-kourier-gateway"},
	"gateway-api.ingress.networking.knative.dev": {"net-gateway-api-controller"},
	"istio.ingress.networking.knative.dev":       {"net-istio-controller"},
	"contour.ingress.networking.knative.dev":     {"net-contour-controller"},
	"traefik.ingress.networking.knative.dev":     {"traefik"},
}

// Networking checks that config-network names an ingress class and that its controller runs.
func Networking(c *Cluster) Result {
	const name = "Knative networking"
	fix := "kubectl apply -f https://github.com/knative-extensions/net-kourier/releases/download/" + KnativeRelease + "/kourier.yaml\n" +
		"kubectl patch configmap config-network -n " + servingNamespace + " --type merge -p '{\"data\":{\"ingress-class\":\"kourier.ingress.networking.knative.dev\"}}'"
	cm := c.ConfigMaps[servingNamespace+"/config-network"]
	if cm == nil {
		return fail(name, servingNamespace+"/config-network is missing: Knative Serving is not installed", fix)
	}
	class := cm.Data["ingress-class"]
	if class == "" {
		class = cm.Data["ingress.class"]
	}
	if class == "" {
		// Knative's own default.
		class = "istio.ingress.networking.knative.dev"
	}
	want, known := ingressControllers[class]
	if !known {
		return fail(name, fmt.Sprintf("ingress class %s is none of %s, which this check knows", class, strings.Join(slices.Sorted(maps.Keys(ingressControllers)), ", ")),
			"kubectl get kingress -A   # READY True shows that the class is served\n"+fix)
	}
	for _, d := range want {
		if !availableAnywhere(c.Deployments, d) {
			return fail(name, fmt.Sprintf("ingress class %s, but its Deployment %s is not running", class, d), fix)
		}
	}
	return pass(name, "ingress class "+class+", served by "+strings.Join(want, ", "))
}

// brokerControllers are the Deployments of knative-eventing that serve each known broker class.
var brokerControllers = map[string][]string{
	"MTChannelBasedBroker": {"mt-broker-controller", "mt-broker-ingress", "mt-broker-filter"},
	"Kafka":                {"kafka-controller", "kafka-broker-receiver", "kafka-broker-dispatcher"},
}

// BrokerClass checks the class of reflector's Broker (its annotation, else Eventing's default
// in config-br-defaults), that the class's controller runs, and, once installed, that the
// Broker is Ready.
func BrokerClass(c *Cluster, pre bool) Result {
	const name = "Broker"
	fix := "kubectl apply -f " + releaseURL("eventing", "in-memory-channel.yaml") + "\n" +
		"kubectl apply -f " + releaseURL("eventing", "mt-channel-broker.yaml")
	class := defaultBrokerClass(c.ConfigMaps[eventingNamespace+"/config-br-defaults"])
	if c.Broker != nil {
		if a := c.Broker.GetAnnotations()["eventing.knative.dev/broker.class"]; a != "" {
			class = a
		}
	}
	if class == "" {
		return fail(name, "no default broker class in "+eventingNamespace+"/config-br-defaults", fix)
	}
	if want, known := brokerControllers[class]; known {
		for _, d := range want {
			if !available(c.Deployments, eventingNamespace, d) {
				return fail(name, fmt.Sprintf("class %s, but its Deployment %s is not running in %s", class, d, eventingNamespace), fix)
			}
		}
	}
	if pre {
		return pass(name, "class "+class)
	}
	if c.Broker == nil {
		return fail(name, "reflector-system/default does not exist: reflector is not installed", "kubectl apply -k knative/")
	}
	if !conditionTrue(c.Broker, "Ready") {
		return fail(name, "reflector-system/default of class "+class+" is not Ready", "kubectl -n reflector-system describe broker default")
	}
	return pass(name, "reflector-system/default of class "+class+" is Ready")
}

// defaultBrokerClass reads clusterDefault.brokerClass from config-br-defaults.
func defaultBrokerClass(cm *corev1.ConfigMap) string {
	if cm == nil {
		return ""
	}
	var cfg struct {
		ClusterDefault struct {
			BrokerClass string `json:"brokerClass"`
		} `json:"clusterDefault"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["default-br-config"]), &cfg); err != nil {
		return ""
	}
	return cfg.ClusterDefault.BrokerClass
}
