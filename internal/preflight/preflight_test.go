package preflight

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/version"
)

// want checks a result: its pass or failure, words its message holds, and that a failure
// carries a fix that holds fixWords (which a pass ignores).
func want(t *testing.T, r Result, ok bool, words []string, fixWords ...string) {
	t.Helper()
	if r.OK != ok {
		t.Errorf("%s: OK = %v, want %v (%s)", r.Name, r.OK, ok, r.Message)
	}
	for _, w := range words {
		if !strings.Contains(r.Message, w) {
			t.Errorf("%s: message %q lacks %q", r.Name, r.Message, w)
		}
	}
	if !ok && r.Fix == "" {
		t.Errorf("%s: a failure without a fix", r.Name)
	}
	if ok && r.Fix != "" {
		t.Errorf("%s: a pass with a fix %q", r.Name, r.Fix)
	}
	for _, w := range fixWords {
		if !ok && !strings.Contains(r.Fix, w) {
			t.Errorf("%s: fix %q lacks %q", r.Name, r.Fix, w)
		}
	}
}

func deployment(namespace, name string, available int32, labels ...string) appsv1.Deployment {
	d := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{}}}
	d.Status.AvailableReplicas = available
	for i := 0; i+1 < len(labels); i += 2 {
		d.Labels[labels[i]] = labels[i+1]
	}
	return d
}

func configMap(data map[string]string) *corev1.ConfigMap { return &corev1.ConfigMap{Data: data} }

func TestKubernetesVersion(t *testing.T) {
	for _, tc := range []struct {
		git string
		ok  bool
	}{
		{"v1.37.2", true},
		{"v1.32.0", true},
		{"v1.33.1-eks-1234abc", true},
		{"v1.31.9-gke.100", false},
		{"v1.30.0", false},
		{"nonsense", false},
		{"v0.0.0-master+$Format:%H$", false},
	} {
		t.Run(tc.git, func(t *testing.T) {
			want(t, KubernetesVersion(&version.Info{GitVersion: tc.git}), tc.ok, nil, "1.32")
		})
	}
	want(t, KubernetesVersion(nil), false, nil)
}

func TestKnativeInstalled(t *testing.T) {
	serving := []appsv1.Deployment{
		deployment("knative-serving", "controller", 1), deployment("knative-serving", "webhook", 1),
		deployment("knative-serving", "activator", 1), deployment("knative-serving", "autoscaler", 1),
	}
	crds := map[string]*unstructured.Unstructured{ServingCRD: {}, BrokerCRD: {}}
	want(t, KnativeServing(&Cluster{CRDs: crds, Deployments: serving}), true, []string{"knative-serving"})
	want(t, KnativeServing(&Cluster{CRDs: map[string]*unstructured.Unstructured{}, Deployments: serving}), false,
		[]string{"not installed", ServingCRD}, KnativeRelease+"/serving-crds.yaml", "serving-core.yaml")
	down := append(serving[:3:3], deployment("knative-serving", "autoscaler", 0))
	want(t, KnativeServing(&Cluster{CRDs: crds, Deployments: down}), false, []string{"autoscaler"}, "describe deployment autoscaler")
	want(t, KnativeEventing(&Cluster{CRDs: crds}), false, []string{"eventing-controller", "eventing-webhook"}, "eventing-core.yaml")
	want(t, KnativeEventing(&Cluster{CRDs: crds, Deployments: []appsv1.Deployment{
		deployment("knative-eventing", "eventing-controller", 1), deployment("knative-eventing", "eventing-webhook", 2),
	}}), true, nil)
}

func TestServingFeatures(t *testing.T) {
	all := map[string]string{}
	for _, f := range ServingFlags {
		all[f] = "enabled"
	}
	want(t, ServingFeatures(configMap(all)), true, nil)
	want(t, ServingFeatures(nil), false, ServingFlags, "kubectl patch configmap config-features -n knative-serving", `"kubernetes.podspec-affinity":"enabled"`)
	some := map[string]string{}
	for k, v := range all {
		some[k] = v
	}
	some["kubernetes.podspec-persistent-volume-write"] = "disabled"
	r := ServingFeatures(configMap(some))
	want(t, r, false, []string{"kubernetes.podspec-persistent-volume-write"}, `"kubernetes.podspec-persistent-volume-write":"enabled"`)
	if strings.Contains(r.Message, "podspec-affinity") {
		t.Errorf("an enabled flag reported: %s", r.Message)
	}
}

func TestEventingOIDC(t *testing.T) {
	want(t, EventingOIDC(configMap(map[string]string{"authentication-oidc": "enabled"})), true, nil)
	want(t, EventingOIDC(configMap(map[string]string{"authentication-oidc": "disabled"})), false, []string{"401"}, `"authentication-oidc":"enabled"`)
	want(t, EventingOIDC(nil), false, nil, "knative-eventing")
}

func TestNetworking(t *testing.T) {
	network := func(data map[string]string) map[string]*corev1.ConfigMap {
		return map[string]*corev1.ConfigMap{"knative-serving/config-network": configMap(data)}
	}
	traefik := []appsv1.Deployment{deployment("traefik", "traefik", 1)}
	for _, tc := range []struct {
		name  string
		c     Cluster
		ok    bool
		words []string
	}{
		{"served", Cluster{ConfigMaps: network(map[string]string{"ingress-class": "traefik.ingress.networking.knative.dev"}), Deployments: traefik}, true, []string{"traefik"}},
		{"the old key", Cluster{ConfigMaps: network(map[string]string{"ingress.class": "traefik.ingress.networking.knative.dev"}), Deployments: traefik}, true, nil},
		{"not served", Cluster{ConfigMaps: network(map[string]string{"ingress-class": "kourier.ingress.networking.knative.dev"}), Deployments: traefik}, false, []string{"net-kourier-controller"}},
		{"Knative's default, istio, not served", Cluster{ConfigMaps: network(nil)}, false, []string{"istio", "net-istio-controller"}},
		{"an unknown class", Cluster{ConfigMaps: network(map[string]string{"ingress-class": "mine.example"})}, false, []string{"mine.example"}},
		{"no Serving", Cluster{}, false, []string{"config-network"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want(t, Networking(&tc.c), tc.ok, tc.words, "kourier.yaml", "ingress-class")
		})
	}
}

func TestBrokerClass(t *testing.T) {
	defaults := map[string]*corev1.ConfigMap{"knative-eventing/config-br-defaults": configMap(map[string]string{
		"default-br-config": "clusterDefault:\n  brokerClass: MTChannelBasedBroker\n  apiVersion: v1\n  kind: ConfigMap\n  name: config-br-default-channel\n",
	})}
	mt := []appsv1.Deployment{
		deployment("knative-eventing", "mt-broker-controller", 1), deployment("knative-eventing", "mt-broker-ingress", 1), deployment("knative-eventing", "mt-broker-filter", 1),
	}
	broker := func(class string, ready bool) *unstructured.Unstructured {
		b := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Ready", "status": map[bool]string{true: "True", false: "False"}[ready]},
		}}}}
		if class != "" {
			b.SetAnnotations(map[string]string{"eventing.knative.dev/broker.class": class})
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		c     Cluster
		pre   bool
		ok    bool
		words []string
	}{
		{"the default class, served", Cluster{ConfigMaps: defaults, Deployments: mt}, true, true, []string{"MTChannelBasedBroker"}},
		{"the default class, not served", Cluster{ConfigMaps: defaults}, true, false, []string{"mt-broker-controller"}},
		{"no default class", Cluster{Deployments: mt}, true, false, []string{"config-br-defaults"}},
		{"installed and Ready", Cluster{ConfigMaps: defaults, Deployments: mt, Broker: broker("", true)}, false, true, []string{"Ready"}},
		{"installed, not Ready", Cluster{ConfigMaps: defaults, Deployments: mt, Broker: broker("", false)}, false, false, []string{"not Ready"}},
		{"not installed", Cluster{ConfigMaps: defaults, Deployments: mt}, false, false, []string{"not installed"}},
		{"the Broker's own class, not served", Cluster{ConfigMaps: defaults, Deployments: mt, Broker: broker("Kafka", true)}, false, false, []string{"Kafka", "kafka-controller"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want(t, BrokerClass(&tc.c, tc.pre), tc.ok, tc.words)
		})
	}
}

func TestStorage(t *testing.T) {
	class := func(name string, isDefault bool) storagev1.StorageClass {
		c := storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "ebs.csi.aws.com"}
		if isDefault {
			c.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		}
		return c
	}
	named := func(n string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &n}}
	}
	bound := &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	for _, tc := range []struct {
		name    string
		classes []storagev1.StorageClass
		claim   *corev1.PersistentVolumeClaim
		ok      bool
		fix     string
	}{
		{"a default class", []storagev1.StorageClass{class("gp2", false), class("gp3", true)}, nil, true, ""},
		{"no default class", []storagev1.StorageClass{class("gp2", false)}, nil, false, "kubectl patch storageclass gp2"},
		{"no class at all", nil, nil, false, "kind: StorageClass"},
		{"the claim's class exists", []storagev1.StorageClass{class("fast", false)}, named("fast"), true, ""},
		{"the claim's class is missing", []storagev1.StorageClass{class("gp3", true)}, named("fast"), false, "kind: StorageClass"},
		{"a bound claim", nil, bound, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fix []string
			if tc.fix != "" {
				fix = []string{tc.fix}
			}
			want(t, Storage(tc.classes, tc.claim), tc.ok, nil, fix...)
		})
	}
}

// crd is a CustomResourceDefinition with one served v1 version whose spec has the given
// properties, and the given storedVersions.
func crd(specProperties []string, stored ...string) *unstructured.Unstructured {
	props := map[string]any{}
	for _, p := range specProperties {
		props[p] = map[string]any{"type": "object"}
	}
	storedAny := make([]any, len(stored))
	for i, s := range stored {
		storedAny[i] = s
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"versions": []any{
			map[string]any{"name": "v1beta2", "served": true, "storage": false, "schema": map[string]any{}},
			map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{
				"openAPIV3Schema": map[string]any{"properties": map[string]any{"spec": map[string]any{"properties": props}}},
			}},
		}},
		"status": map[string]any{"storedVersions": storedAny},
	}}
}

func TestStoredVersions(t *testing.T) {
	want(t, StoredVersions(PolicyCRD, nil), true, []string{"not installed"})
	want(t, StoredVersions(PolicyCRD, crd(nil, "v1")), true, nil)
	want(t, StoredVersions(PolicyCRD, crd(nil, "v1beta2", "v1")), false, []string{"v1beta2"},
		"kubectl get imagepolicies -A -o json | kubectl replace -f -",
		`kubectl patch crd imagepolicies.image.toolkit.fluxcd.io --subresource=status --type=merge -p '{"status":{"storedVersions":["v1"]}}'`)
	want(t, StoredVersions(RepositoryCRD, crd(nil, "v1beta1", "v1beta2")), false, []string{"v1beta1, v1beta2"}, "kubectl get imagerepositories -A")
}

func TestPolicySchema(t *testing.T) {
	want(t, PolicySchema(nil), true, nil)
	want(t, PolicySchema(crd([]string{"imageRepositoryRef", "policy", "verify"}, "v1")), true, []string{"spec.verify"})
	want(t, PolicySchema(crd([]string{"imageRepositoryRef", "policy"}, "v1")), false, []string{"Flux"},
		"--server-side", "--components-extra=image-automation-controller")
	// spec.verify in another version than the served v1 does not count.
	other := crd([]string{"policy"}, "v1")
	versions, _, _ := unstructured.NestedSlice(other.Object, "spec", "versions")
	versions[1].(map[string]any)["served"] = false
	_ = unstructured.SetNestedSlice(other.Object, versions, "spec", "versions")
	want(t, PolicySchema(other), false, nil)
}

func TestFlux(t *testing.T) {
	zero := int32(0)
	stopped := deployment("flux-system", "image-reflector-controller", 0, "app.kubernetes.io/version", "v2.7.2")
	stopped.Spec.Replicas = &zero
	running := deployment("flux-system", "image-reflector-controller", 1, "app.kubernetes.io/version", "v2.7.2")
	source := deployment("flux-system", "source-controller", 1, "app.kubernetes.io/version", "v2.7.2")
	old := deployment("flux-system", "kustomize-controller", 1, "app.kubernetes.io/version", "v2.6.4")
	unlabelled := deployment("flux-system", "source-controller", 1)

	want(t, FluxVersion(nil), true, []string{"not installed"})
	want(t, FluxVersion([]appsv1.Deployment{source, stopped}), true, []string{"v2.7.2"})
	want(t, FluxVersion([]appsv1.Deployment{source, old}), false, []string{"v2.6.4"}, "flux install")
	want(t, FluxVersion([]appsv1.Deployment{unlabelled}), false, []string{"app.kubernetes.io/version"})

	want(t, ImageReflectorController(nil), true, []string{"not installed"})
	want(t, ImageReflectorController([]appsv1.Deployment{source, stopped}), true, []string{"zero"})
	want(t, ImageReflectorController([]appsv1.Deployment{source, running}), false, []string{"1 replicas"},
		"kubectl -n flux-system scale deployment image-reflector-controller --replicas=0", "--components-extra=image-automation-controller")
	// Another namespace's Deployment of that name is not Flux's.
	other := running
	other.Namespace = "team"
	want(t, ImageReflectorController([]appsv1.Deployment{other}), true, nil)
}

func ksvc(url string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"url": url}}}
}

// otherNameServer serves handler on 127.0.0.1 over TLS with a certificate for another name,
// and returns a client that trusts the certificate's CA.
func otherNameServer(t *testing.T, handler http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "route"},
		DNSNames:              []string{"reflector-webhook.reflector-system.example.com"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(handler)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return s, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

func TestWebhookRoute(t *testing.T) {
	healthy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer healthy.Close()
	broken := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer broken.Close()
	for _, s := range []*httptest.Server{healthy, broken} {
		if !strings.HasPrefix(s.URL, "https://127.0.0.1:") {
			t.Fatalf("test server at %s, not 127.0.0.1", s.URL)
		}
	}
	ctx := context.Background()
	probe := HTTPProber(healthy.Client(), 5*time.Second)
	// A client that does not trust the test certificate: the route's TLS is not valid.
	untrusting := HTTPProber(&http.Client{}, 5*time.Second)

	want(t, WebhookRoute(ctx, nil, probe, false), false, []string{"not installed"}, "kubectl apply")
	want(t, WebhookRoute(ctx, ksvc(""), probe, false), false, []string{"no URL"})
	want(t, WebhookRoute(ctx, ksvc("http://reflector-webhook.reflector-system.example.com"), probe, false), false, []string{"not https"},
		"external-domain-tls", "config-domain", "default-external-scheme")
	want(t, WebhookRoute(ctx, ksvc(healthy.URL), nil, false), true, []string{healthy.URL})
	want(t, WebhookRoute(ctx, ksvc(healthy.URL), probe, false), true, []string{"answers over TLS"})
	want(t, WebhookRoute(ctx, ksvc(broken.URL), HTTPProber(broken.Client(), 5*time.Second), false), false, []string{"503"}, "curl -v "+broken.URL+"/healthz")
	want(t, WebhookRoute(ctx, ksvc(healthy.URL), untrusting, false), false, []string{"certificate is not trusted", "unknown authority"}, "--ca-file=", "cert-manager")
	// A route whose certificate is for other names: not trusted either.
	other, client := otherNameServer(t, healthy.Config.Handler)
	want(t, WebhookRoute(ctx, ksvc(other.URL), HTTPProber(client, 5*time.Second), false), false, []string{"certificate is not trusted", "127.0.0.1"}, "--ca-file=")
	// An error that is not the certificate's keeps the general fix.
	if r := WebhookRoute(ctx, ksvc(broken.URL), HTTPProber(broken.Client(), 5*time.Second), false); strings.Contains(r.Fix, "--ca-file") {
		t.Errorf("a 503 is answered with the certificate's fix: %s", r.Fix)
	}
	// --allow-http: a plain http route passes when it answers, and only then.
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer plain.Close()
	want(t, WebhookRoute(ctx, ksvc(plain.URL), HTTPProber(plain.Client(), 5*time.Second), true), true, []string{plain.URL, "http, allowed by --allow-http"})
	want(t, WebhookRoute(ctx, ksvc(broken.URL), HTTPProber(broken.Client(), 5*time.Second), true), false, []string{"503"})
	r := WebhookRoute(ctx, ksvc("http://user:secret@reflector-webhook.example.com"), probe, false)
	if strings.Contains(r.Message+r.Fix, "secret") {
		t.Errorf("URL userinfo shown: %s", r.Message)
	}
}

func TestFailed(t *testing.T) {
	if Failed([]Result{{OK: true}, {OK: true}}) || !Failed([]Result{{OK: true}, {}}) {
		t.Error("Failed does not tell a failure from passes")
	}
}
