package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/imagereflector/reflector/internal/testenv"
)

var (
	repositories = schema.GroupVersionResource{Group: "image.toolkit.fluxcd.io", Version: "v1", Resource: "imagerepositories"}
	policies     = schema.GroupVersionResource{Group: "image.toolkit.fluxcd.io", Version: "v1", Resource: "imagepolicies"}
	secrets      = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// identity is one ServiceAccount of knative/, with clients that act as it.
type identity struct {
	dynamic   dynamic.Interface
	clientset kubernetes.Interface
}

func impersonate(t *testing.T, env *testenv.Env, sa string) identity {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + sa}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return identity{dynamic: d, clientset: c}
}

// installRBAC creates knative/'s ServiceAccounts, ClusterRoles and ClusterRoleBindings for real.
func installRBAC(t *testing.T, env *testenv.Env) {
	t.Helper()
	ensureNamespace(t, env)
	a := newApplier(env)
	n := 0
	for _, obj := range build(t, placeholderImages()) {
		switch obj.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if _, err := a.apply(context.Background(), obj, false); err != nil {
				t.Fatalf("%s: %v", key(obj), err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("knative/ has no RBAC objects")
	}
}

// fixture is what the functions work on in a user's namespace: an ImageRepository with
// credentials, an ImagePolicy, the namespace's webhook Secret, and a Secret nobody needs.
type fixture struct {
	ns, repo, policy string
}

func newFixture(t *testing.T, env *testenv.Env) fixture {
	t.Helper()
	ns := env.Namespace(t)
	webhook, err := os.ReadFile(filepath.Join(repoRoot(t), "knative", "secrets", "webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifests := strings.ReplaceAll(string(webhook), "namespace: NAMESPACE", "namespace: "+ns) + `
---
apiVersion: v1
kind: Secret
metadata:
  name: registry-credentials
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths":{}}'
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: puller
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: app
spec:
  image: registry.example.com/team/app
  interval: 5m
  secretRef:
    name: registry-credentials
  serviceAccountName: puller
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: app
spec:
  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: ">=1.0.0"
`
	if _, err := env.Apply(context.Background(), ns, []byte(manifests)); err != nil {
		t.Fatal(err)
	}
	return fixture{ns: ns, repo: "app", policy: "app"}
}

// TestRBACIntegration impersonates each ServiceAccount of knative/ against the apiserver: each
// can do its job, and nothing outside it.
func TestRBACIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installRBAC(t, env)
	fx := newFixture(t, env)
	ctx := context.Background()

	merge := func(id identity, gvr schema.GroupVersionResource, name, patch string, sub ...string) error {
		_, err := id.dynamic.Resource(gvr).Namespace(fx.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, sub...)
		return err
	}
	jsonPatch := func(id identity, gvr schema.GroupVersionResource, name, patch string) error {
		_, err := id.dynamic.Resource(gvr).Namespace(fx.ns).Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	get := func(id identity, gvr schema.GroupVersionResource, name string) error {
		_, err := id.dynamic.Resource(gvr).Namespace(fx.ns).Get(ctx, name, metav1.GetOptions{})
		return err
	}
	list := func(id identity, gvr schema.GroupVersionResource) error {
		_, err := id.dynamic.Resource(gvr).List(ctx, metav1.ListOptions{})
		return err
	}
	event := func(id identity) error {
		_, err := id.clientset.CoreV1().Events(fx.ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "app."},
			InvolvedObject: corev1.ObjectReference{APIVersion: "image.toolkit.fluxcd.io/v1", Kind: "ImageRepository", Namespace: fx.ns, Name: fx.repo},
			Reason:         "Succeeded", Message: "rbac test", Type: corev1.EventTypeNormal,
		}, metav1.CreateOptions{})
		return err
	}
	// watch opens and closes a watch of every namespace's objects of each resource, as the
	// functions' watched copies do.
	watch := func(id identity, resources ...schema.GroupVersionResource) error {
		for _, gvr := range resources {
			w, err := id.dynamic.Resource(gvr).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			w.Stop()
		}
		return nil
	}
	writeSecret := func(id identity) error {
		_, err := id.clientset.CoreV1().Secrets(fx.ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "stolen-"},
		}, metav1.CreateOptions{})
		return err
	}
	listWebhookSecrets := func(id identity) error {
		_, err := id.dynamic.Resource(secrets).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=reflector-webhook"})
		return err
	}
	serviceAccountToken := func(id identity, namespace string) error {
		_, err := id.clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "puller", &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{"sts.amazonaws.com"}},
		}, metav1.CreateOptions{})
		return err
	}
	review := func(id identity) error {
		_, err := id.clientset.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: "not-a-token", Audiences: []string{"reflector-scan"}},
		}, metav1.CreateOptions{})
		return err
	}
	deleteCRD := func(id identity) error {
		return id.dynamic.Resource(crdGVR).Delete(ctx, "imagerepositories.image.toolkit.fluxcd.io", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	const (
		annotate     = `{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"rbac-test"}}}`
		repoStatus   = `{"status":{"canonicalImageName":"registry.example.com/team/app"}}`
		policyStatus = `{"status":{"observedGeneration":1}}`
		// A JSON patch of the finalizers list, as the functions send to an object being deleted
		// that holds Flux's finalizer; the fixture's objects hold none, so it changes nothing.
		dropFinalizers = `[{"op":"add","path":"/metadata/finalizers","value":[]}]`
	)

	type check struct {
		what    string
		allowed bool
		do      func(identity) error
	}
	// Shared by every identity: nothing of reflector may write Secrets, delete the CRDs or
	// delete the objects it reconciles.
	never := []check{
		{"create a Secret", false, writeSecret},
		{"delete a CRD", false, deleteCRD},
		{"delete an ImageRepository", false, func(id identity) error {
			return id.dynamic.Resource(repositories).Namespace(fx.ns).Delete(ctx, fx.repo, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"list Secrets", false, func(id identity) error { return list(id, secrets) }},
		{"list Pods", false, func(id identity) error {
			_, err := id.clientset.CoreV1().Pods(fx.ns).List(ctx, metav1.ListOptions{})
			return err
		}},
	}
	for _, tc := range []struct {
		sa     string
		checks []check
	}{
		{"reflector-scan", []check{
			{"list ImageRepositories", true, func(id identity) error { return list(id, repositories) }},
			{"watch ImageRepositories", true, func(id identity) error { return watch(id, repositories) }},
			{"get an ImageRepository", true, func(id identity) error { return get(id, repositories, fx.repo) }},
			{"annotate an ImageRepository", true, func(id identity) error { return merge(id, repositories, fx.repo, annotate) }},
			{"patch ImageRepository status", true, func(id identity) error { return merge(id, repositories, fx.repo, repoStatus, "status") }},
			{"remove a finalizer of an ImageRepository", true, func(id identity) error { return jsonPatch(id, repositories, fx.repo, dropFinalizers) }},
			{"get the repository's credentials Secret", true, func(id identity) error { return get(id, secrets, "registry-credentials") }},
			{"get the namespace's webhook Secret", true, func(id identity) error { return get(id, secrets, "reflector-webhook") }},
			{"list the webhook Secrets of every namespace by name", true, listWebhookSecrets},
			{"review a token", true, review},
			{"get the repository's ServiceAccount", true, func(id identity) error {
				_, err := id.clientset.CoreV1().ServiceAccounts(fx.ns).Get(ctx, "puller", metav1.GetOptions{})
				return err
			}},
			{"request a token of the repository's ServiceAccount", true, func(id identity) error { return serviceAccountToken(id, fx.ns) }},
			{"create an Event", true, event},
			{"list ImagePolicies", false, func(id identity) error { return list(id, policies) }},
			{"watch ImagePolicies", false, func(id identity) error { return watch(id, policies) }},
			{"patch ImagePolicy status", false, func(id identity) error { return merge(id, policies, fx.policy, policyStatus, "status") }},
		}},
		{"reflector-policy", []check{
			{"list ImagePolicies", true, func(id identity) error { return list(id, policies) }},
			{"watch ImagePolicies and ImageRepositories", true, func(id identity) error { return watch(id, policies, repositories) }},
			{"get an ImagePolicy", true, func(id identity) error { return get(id, policies, fx.policy) }},
			{"patch ImagePolicy status", true, func(id identity) error { return merge(id, policies, fx.policy, policyStatus, "status") }},
			{"remove a finalizer of an ImagePolicy", true, func(id identity) error { return jsonPatch(id, policies, fx.policy, dropFinalizers) }},
			{"get an ImageRepository", true, func(id identity) error { return get(id, repositories, fx.repo) }},
			{"list ImageRepositories", true, func(id identity) error { return list(id, repositories) }},
			{"get a Namespace (accessFrom)", true, func(id identity) error {
				_, err := id.clientset.CoreV1().Namespaces().Get(ctx, fx.ns, metav1.GetOptions{})
				return err
			}},
			{"get the repository's credentials Secret", true, func(id identity) error { return get(id, secrets, "registry-credentials") }},
			{"request a token of the repository's ServiceAccount", true, func(id identity) error { return serviceAccountToken(id, fx.ns) }},
			{"create an Event", true, event},
			{"review a token", true, review},
			{"list the webhook Secrets", false, listWebhookSecrets},
			{"annotate an ImageRepository", false, func(id identity) error { return merge(id, repositories, fx.repo, annotate) }},
			{"patch ImageRepository status", false, func(id identity) error { return merge(id, repositories, fx.repo, repoStatus, "status") }},
			{"remove a finalizer of an ImageRepository", false, func(id identity) error { return jsonPatch(id, repositories, fx.repo, dropFinalizers) }},
		}},
		{"reflector-cron", []check{
			{"list ImageRepositories", true, func(id identity) error { return list(id, repositories) }},
			{"list ImagePolicies", true, func(id identity) error { return list(id, policies) }},
			{"get a Secret", false, func(id identity) error { return get(id, secrets, "registry-credentials") }},
			{"list the webhook Secrets", false, listWebhookSecrets},
			{"review a token", false, review},
			{"annotate an ImageRepository", false, func(id identity) error { return merge(id, repositories, fx.repo, annotate) }},
			{"patch ImagePolicy status", false, func(id identity) error { return merge(id, policies, fx.policy, policyStatus, "status") }},
			{"remove a finalizer of an ImagePolicy", false, func(id identity) error { return jsonPatch(id, policies, fx.policy, dropFinalizers) }},
			{"request a token of the repository's ServiceAccount", false, func(id identity) error { return serviceAccountToken(id, fx.ns) }},
			{"create an Event", false, event},
		}},
		{"reflector-source", []check{
			{"list ImageRepositories", true, func(id identity) error { return list(id, repositories) }},
			{"list ImagePolicies", true, func(id identity) error { return list(id, policies) }},
			{"watch ImageRepositories and ImagePolicies", true, func(id identity) error { return watch(id, repositories, policies) }},
			{"get an ImageRepository", true, func(id identity) error { return get(id, repositories, fx.repo) }},
			{"get a Secret", false, func(id identity) error { return get(id, secrets, "registry-credentials") }},
			{"annotate an ImageRepository", false, func(id identity) error { return merge(id, repositories, fx.repo, annotate) }},
		}},
	} {
		t.Run(tc.sa, func(t *testing.T) {
			id := impersonate(t, env, tc.sa)
			for _, c := range append(tc.checks, never...) {
				err := c.do(id)
				switch {
				case c.allowed && err != nil:
					t.Errorf("%s cannot %s: %v", tc.sa, c.what, err)
				case !c.allowed && err == nil:
					t.Errorf("%s can %s", tc.sa, c.what)
				case !c.allowed && !apierrors.IsForbidden(err):
					t.Errorf("%s %s: want Forbidden, got %v", tc.sa, c.what, err)
				}
			}
		})
	}
}

// TestApiServerSourceAccessIntegration asks the apiserver the questions Knative's
// ApiServerSource reconciler asks before it starts the adapter: get, list and watch of every
// watched resource, by the source's ServiceAccount, in every namespace.
func TestApiServerSourceAccessIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installRBAC(t, env)
	ns := env.Namespace(t)
	var source *unstructured.Unstructured
	for _, obj := range build(t, placeholderImages()) {
		if obj.GetKind() == "ApiServerSource" {
			source = obj
		}
	}
	if source == nil {
		t.Fatal("knative/ has no ApiServerSource")
	}
	sa, _, _ := unstructured.NestedString(source.Object, "spec", "serviceAccountName")
	if mode, _, _ := unstructured.NestedString(source.Object, "spec", "mode"); mode != "Resource" {
		t.Errorf("ApiServerSource mode %q, want Resource: the functions decide from the whole object", mode)
	}
	resources, _, _ := unstructured.NestedSlice(source.Object, "spec", "resources")
	if len(resources) != 2 {
		t.Errorf("ApiServerSource watches %d resources, want ImageRepository and ImagePolicy", len(resources))
	}
	plural := map[string]string{"ImageRepository": "imagerepositories", "ImagePolicy": "imagepolicies"}
	for _, r := range resources {
		m, _ := r.(map[string]any)
		kind, _ := m["kind"].(string)
		gv, err := schema.ParseGroupVersion(m["apiVersion"].(string))
		if err != nil || plural[kind] == "" {
			t.Fatalf("unexpected resource %v", m)
		}
		for _, verb := range []string{"get", "list", "watch"} {
			review, err := env.Clientset().AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sarFor(sa, ns, gv, plural[kind], verb), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !review.Status.Allowed {
				t.Errorf("%s cannot %s %s in %s: %s", sa, verb, plural[kind], ns, review.Status.Reason)
			}
		}
	}
}

func sarFor(sa, ns string, gv schema.GroupVersion, resource, verb string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + namespace + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: gv.Group, Version: gv.Version, Resource: resource,
		},
	}}
}
