package deploy

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/kyaml/kio"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
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

// installRBAC creates the ServiceAccounts, ClusterRoles and ClusterRoleBindings of knative/,
// built with the given components of knative/, for real, and returns them.
func installRBAC(t *testing.T, env *testenv.Env, components ...string) []*unstructured.Unstructured {
	t.Helper()
	ensureNamespace(t, env)
	a := newApplier(env)
	var installed []*unstructured.Unstructured
	for _, obj := range build(t, withComponents(placeholderImages(), components...)) {
		if !isRBAC(obj) {
			continue
		}
		if _, err := a.apply(context.Background(), obj, false); err != nil {
			t.Fatalf("%s: %v", key(obj), err)
		}
		installed = append(installed, obj)
	}
	if len(installed) == 0 {
		t.Fatal("knative/ has no RBAC objects")
	}
	return installed
}

// withComponents adds a components: section naming the given components of knative/ to an
// overlay.
func withComponents(overlay string, components ...string) string {
	if len(components) == 0 {
		return overlay
	}
	overlay += "components:\n"
	for _, c := range components {
		overlay += "  - {{knative}}/" + c + "\n"
	}
	return overlay
}

func isRBAC(obj *unstructured.Unstructured) bool {
	switch obj.GetKind() {
	case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		return true
	}
	return false
}

// serviceAccounts are the ServiceAccounts of knative/, one per workload.
var serviceAccounts = []string{"reflector-webhook", "reflector-scan", "reflector-policy", "reflector-cron", "reflector-source"}

// requestToken asks for a token of the ServiceAccount namespace/name for a cloud's audience, as
// object-level workload identity does (internal/cloudauth).
func requestToken(ctx context.Context, id identity, namespace, name string) error {
	_, err := id.clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{"sts.amazonaws.com"}},
	}, metav1.CreateOptions{})
	return err
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
	listSecretsNamed := func(id identity, name string) error {
		_, err := id.dynamic.Resource(secrets).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		return err
	}
	listWebhookSecrets := func(id identity) error { return listSecretsNamed(id, "reflector-webhook") }
	review := func(id identity) error {
		_, err := id.clientset.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: "not-a-token", Audiences: []string{"reflector-scan"}},
		}, metav1.CreateOptions{})
		return err
	}
	deleteCRD := func(id identity) error {
		return id.dynamic.Resource(crdGVR).Delete(ctx, "imagerepositories.image.toolkit.fluxcd.io", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	getCRD := func(id identity, name string) error {
		_, err := id.dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		return err
	}
	getServiceAccount := func(id identity) error {
		_, err := id.clientset.CoreV1().ServiceAccounts(fx.ns).Get(ctx, "puller", metav1.GetOptions{})
		return err
	}
	const (
		annotate     = `{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"rbac-test"}}}`
		repoStatus   = `{"status":{"canonicalImageName":"registry.example.com/team/app"}}`
		policyStatus = `{"status":{"observedGeneration":1}}`
		// A JSON patch of the finalizers list, as the functions send to an object being deleted
		// that holds Flux's finalizer; the fixture's objects hold none, so it changes nothing.
		dropFinalizers = `[{"op":"add","path":"/metadata/finalizers","value":[]}]`
	)

	// Shared by every identity: nothing of reflector may write Secrets, delete the CRDs, create
	// or delete the objects it reconciles, or mint a token for any ServiceAccount (that is the
	// object-level-identity component's grant, TestObjectLevelIdentityRBACIntegration).
	never := []check{
		{"create a Secret", false, writeSecret},
		{"delete a CRD", false, deleteCRD},
		{"get the ImageRepository CRD", false, func(id identity) error { return getCRD(id, "imagerepositories.image.toolkit.fluxcd.io") }},
		{"create an ImageRepository", false, func(id identity) error {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
				"metadata": map[string]any{"name": "planted"},
				"spec":     map[string]any{"image": "registry.example.com/team/planted"},
			}}
			_, err := id.dynamic.Resource(repositories).Namespace(fx.ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"delete an ImageRepository", false, func(id identity) error {
			return id.dynamic.Resource(repositories).Namespace(fx.ns).Delete(ctx, fx.repo, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"list Secrets", false, func(id identity) error { return list(id, secrets) }},
		{"list Pods", false, func(id identity) error {
			_, err := id.clientset.CoreV1().Pods(fx.ns).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"request a token of the repository's ServiceAccount", false, func(id identity) error { return requestToken(ctx, id, fx.ns, "puller") }},
		{"request a token of a ServiceAccount of reflector-system", false, func(id identity) error {
			return requestToken(ctx, id, namespace, "reflector-cron")
		}},
	}
	for _, tc := range []struct {
		sa     string
		checks []check
	}{
		// The public pod: what a registry webhook's path calls, and the review of the Broker's
		// tokens on /broker; nothing of the policy function's (no ImagePolicies).
		{"reflector-webhook", []check{
			{"list the webhook Secrets of every namespace by name", true, listWebhookSecrets},
			{"list ImageRepositories", true, func(id identity) error { return list(id, repositories) }},
			{"watch ImageRepositories", true, func(id identity) error { return watch(id, repositories) }},
			{"get an ImageRepository", true, func(id identity) error { return get(id, repositories, fx.repo) }},
			{"annotate an ImageRepository", true, func(id identity) error { return merge(id, repositories, fx.repo, annotate) }},
			{"patch ImageRepository status", true, func(id identity) error { return merge(id, repositories, fx.repo, repoStatus, "status") }},
			{"remove a finalizer of an ImageRepository", true, func(id identity) error { return jsonPatch(id, repositories, fx.repo, dropFinalizers) }},
			{"get the repository's credentials Secret", true, func(id identity) error { return get(id, secrets, "registry-credentials") }},
			{"get the repository's ServiceAccount", true, getServiceAccount},
			{"create an Event", true, event},
			{"review a token", true, review},
			{"list other Secrets by name", false, func(id identity) error { return listSecretsNamed(id, "registry-credentials") }},
			{"list one namespace's Secrets", false, func(id identity) error {
				_, err := id.clientset.CoreV1().Secrets(fx.ns).List(ctx, metav1.ListOptions{})
				return err
			}},
			{"watch the webhook Secrets", false, func(id identity) error {
				w, err := id.dynamic.Resource(secrets).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=reflector-webhook"})
				if err == nil {
					w.Stop()
				}
				return err
			}},
			{"list ServiceAccounts", false, func(id identity) error {
				_, err := id.clientset.CoreV1().ServiceAccounts(fx.ns).List(ctx, metav1.ListOptions{})
				return err
			}},
			{"get a Namespace", false, func(id identity) error {
				_, err := id.clientset.CoreV1().Namespaces().Get(ctx, fx.ns, metav1.GetOptions{})
				return err
			}},
			{"get an ImagePolicy", false, func(id identity) error { return get(id, policies, fx.policy) }},
			{"list ImagePolicies", false, func(id identity) error { return list(id, policies) }},
			{"watch ImagePolicies", false, func(id identity) error { return watch(id, policies) }},
			{"remove a finalizer of an ImagePolicy", false, func(id identity) error { return jsonPatch(id, policies, fx.policy, dropFinalizers) }},
			{"patch ImagePolicy status", false, func(id identity) error { return merge(id, policies, fx.policy, policyStatus, "status") }},
		}},
		{"reflector-scan", []check{
			{"list ImageRepositories", true, func(id identity) error { return list(id, repositories) }},
			{"watch ImageRepositories", true, func(id identity) error { return watch(id, repositories) }},
			{"get an ImageRepository", true, func(id identity) error { return get(id, repositories, fx.repo) }},
			{"annotate an ImageRepository", true, func(id identity) error { return merge(id, repositories, fx.repo, annotate) }},
			{"patch ImageRepository status", true, func(id identity) error { return merge(id, repositories, fx.repo, repoStatus, "status") }},
			{"remove a finalizer of an ImageRepository", true, func(id identity) error { return jsonPatch(id, repositories, fx.repo, dropFinalizers) }},
			{"get the repository's credentials Secret", true, func(id identity) error { return get(id, secrets, "registry-credentials") }},
			{"review a token", true, review},
			{"get the repository's ServiceAccount", true, getServiceAccount},
			{"create an Event", true, event},
			// Only the public surface authenticates registry webhooks.
			{"list the webhook Secrets", false, listWebhookSecrets},
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
			{"get the repository's ServiceAccount", true, getServiceAccount},
			{"create an Event", true, event},
			{"review a token", true, review},
			{"get the ImagePolicy CRD", true, func(id identity) error { return getCRD(id, "imagepolicies.image.toolkit.fluxcd.io") }},
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
			checkAccess(t, impersonate(t, env, tc.sa), tc.sa, append(tc.checks, never...))
		})
	}
}

// TestObjectLevelIdentityRBACIntegration installs knative/ with the object-level-identity
// component: the functions that log in to registries for an object (reflector-webhook,
// reflector-scan, reflector-policy) may then request a token of the object's ServiceAccount; the
// cron reconciler and the ApiServerSource still may not, and the component grants nothing else.
func TestObjectLevelIdentityRBACIntegration(t *testing.T) {
	env := testenv.Kube(t)
	ctx := context.Background()
	base := map[string]*unstructured.Unstructured{}
	for _, obj := range installRBAC(t, env) {
		base[key(obj)] = obj
	}
	var added []*unstructured.Unstructured
	for _, obj := range installRBAC(t, env, "object-level-identity") {
		if b, ok := base[key(obj)]; !ok {
			added = append(added, obj)
		} else if !equality.Semantic.DeepEqual(b.Object, obj.Object) {
			t.Errorf("the component changes %s", key(obj))
		}
	}
	// The apiserver is shared by the package's tests, which expect the default install: the
	// component's grants go again, and the test waits until the authorizer has seen it.
	t.Cleanup(func() {
		rbac := clientset.For(env).RbacV1()
		for _, obj := range added {
			var err error
			switch obj.GetKind() {
			case "ClusterRole":
				err = rbac.ClusterRoles().Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			case "ClusterRoleBinding":
				err = rbac.ClusterRoleBindings().Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			}
			if err != nil {
				t.Errorf("deleting %s: %v", key(obj), err)
			}
		}
		err := testenv.Poll(ctx, 30*time.Second, 20*time.Millisecond, func() error {
			for _, sa := range serviceAccounts {
				review, err := clientset.For(env).AuthorizationV1().SubjectAccessReviews().Create(ctx, tokenReview(sa, "default"), metav1.CreateOptions{})
				if err != nil {
					return err
				}
				if review.Status.Allowed {
					return fmt.Errorf("%s may still create tokens", sa)
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})

	// What the component adds: a ClusterRole whose only rule creates tokens, bound to the three
	// functions.
	subjects := map[string]bool{}
	for _, obj := range added {
		switch obj.GetKind() {
		case "ClusterRole":
			rules, _, _ := unstructured.NestedSlice(obj.Object, "rules")
			want := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"serviceaccounts/token"}, "verbs": []any{"create"}}}
			if !equality.Semantic.DeepEqual(rules, want) {
				t.Errorf("%s: rules %v, want only create on serviceaccounts/token", key(obj), rules)
			}
		case "ClusterRoleBinding":
			list, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range list {
				m, _ := s.(map[string]any)
				subjects[fmt.Sprint(m["namespace"], "/", m["name"])] = true
			}
		default:
			t.Errorf("the component adds %s", key(obj))
		}
	}
	if len(added) == 0 {
		t.Fatal("the object-level-identity component adds no RBAC objects")
	}

	fx := newFixture(t, env)
	loginFor := map[string]bool{"reflector-webhook": true, "reflector-scan": true, "reflector-policy": true}
	for _, sa := range serviceAccounts {
		if loginFor[sa] != subjects[namespace+"/"+sa] {
			t.Errorf("%s: bound to the token role %v, want %v", sa, subjects[namespace+"/"+sa], loginFor[sa])
		}
		checkAccess(t, impersonate(t, env, sa), sa, []check{
			{"request a token of the repository's ServiceAccount", loginFor[sa], func(id identity) error {
				return requestToken(ctx, id, fx.ns, "puller")
			}},
		})
	}
}

// tokenReview asks whether reflector's ServiceAccount sa may create tokens of the
// ServiceAccounts of ns.
func tokenReview(sa, ns string) *authorizationv1.SubjectAccessReview {
	r := sarFor(sa, ns, schema.GroupVersion{Version: "v1"}, "serviceaccounts", "create")
	r.Spec.ResourceAttributes.Subresource = "token"
	return r
}

// TestRBACRulesSayWhy reads the RBAC manifests of knative/ and its components as written: every
// rule of every role carries a comment that says which call needs it, and every role that
// kustomize builds, with every component, is one of those read.
func TestRBACRulesSayWhy(t *testing.T) {
	root := filepath.Join(repoRoot(t), "knative")
	read := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		nodes, err := kio.FromBytes(b)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, n := range nodes {
			if k := n.GetKind(); k != "ClusterRole" && k != "Role" {
				continue
			}
			read[n.GetKind()+"/"+n.GetName()] = true
			rules, err := n.Pipe(kyaml.Lookup("rules"))
			if err != nil || rules == nil {
				t.Errorf("%s: %s %s has no rules", path, n.GetKind(), n.GetName())
				continue
			}
			elements, err := rules.Elements()
			if err != nil {
				return err
			}
			for i, rule := range elements {
				if strings.TrimSpace(strings.TrimLeft(rule.YNode().HeadComment, "# ")) == "" {
					t.Errorf("%s: rule %d of %s %s has no comment saying why it is there", path, i, n.GetKind(), n.GetName())
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var components []string
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(root, d.Name(), "kustomization.yaml"))
		// A component made of others (multi-tenancy) would add their roles twice.
		if d.IsDir() && err == nil && !strings.Contains(string(b), "\ncomponents:") {
			components = append(components, d.Name())
		}
	}
	built := 0
	for _, obj := range build(t, withComponents(placeholderImages(), components...)) {
		if k := obj.GetKind(); k == "ClusterRole" || k == "Role" {
			built++
			if !read[k+"/"+obj.GetName()] {
				t.Errorf("%s %s is built but was not read from knative/", k, obj.GetName())
			}
		}
	}
	if built == 0 {
		t.Fatal("kustomize builds no roles")
	}
}

// check is one request that an identity must, or must not, be allowed to make.
type check struct {
	what    string
	allowed bool
	do      func(identity) error
}

// checkAccess makes each check's request as id, the ServiceAccount sa: an allowed one must
// succeed, any other must be refused as Forbidden.
func checkAccess(t *testing.T, id identity, sa string, checks []check) {
	t.Helper()
	for _, c := range checks {
		err := c.do(id)
		switch {
		case c.allowed && err != nil:
			t.Errorf("%s cannot %s: %v", sa, c.what, err)
		case !c.allowed && err == nil:
			t.Errorf("%s can %s", sa, c.what)
		case !c.allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s %s: want Forbidden, got %v", sa, c.what, err)
		}
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
			review, err := clientset.For(env).AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sarFor(sa, ns, gv, plural[kind], verb), metav1.CreateOptions{})
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
