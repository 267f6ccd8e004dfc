package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
)

// admissionPolicy is the name of the admission-policy component's policy and binding.
const admissionPolicy = "reflector-writes"

// installAdmissionPolicy creates the admission-policy component's ValidatingAdmissionPolicy and
// its binding for real, and deletes them when the test ends: the apiserver is shared by the
// package's tests, which expect the default install.
func installAdmissionPolicy(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	a := newApplier(env)
	var installed []*unstructured.Unstructured
	for _, obj := range build(t, withComponents(placeholderImages(), "admission-policy")) {
		if obj.GroupVersionKind().Group != "admissionregistration.k8s.io" {
			continue
		}
		if _, err := a.apply(ctx, obj, false); err != nil {
			t.Fatalf("%s: %v", key(obj), err)
		}
		installed = append(installed, obj)
	}
	t.Cleanup(func() {
		vap := clientset.For(env).AdmissionregistrationV1()
		for _, obj := range installed {
			var err error
			switch obj.GetKind() {
			case "ValidatingAdmissionPolicy":
				err = vap.ValidatingAdmissionPolicies().Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			case "ValidatingAdmissionPolicyBinding":
				err = vap.ValidatingAdmissionPolicyBindings().Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			}
			if err != nil {
				t.Errorf("deleting %s: %v", key(obj), err)
			}
		}
	})
	kinds := map[string]string{}
	for _, obj := range installed {
		kinds[obj.GetKind()] = obj.GetName()
	}
	if kinds["ValidatingAdmissionPolicy"] != admissionPolicy || kinds["ValidatingAdmissionPolicyBinding"] != admissionPolicy {
		t.Fatalf("the admission-policy component builds %v, want the policy %s and its binding", kinds, admissionPolicy)
	}
}

// kubeAs is reflector's own client (internal/kube), as the functions build it, acting as
// reflector's ServiceAccount sa, with groups added to the ServiceAccount's own when given.
func kubeAs(t *testing.T, env *testenv.Env, sa string, groups ...string) *kube.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + sa}
	if len(groups) > 0 {
		cfg.Impersonate.Groups = append([]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}, groups...)
	}
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refusedByPolicy checks that err is the admission policy's refusal, with the message of the
// rule that refused.
func refusedByPolicy(t *testing.T, what string, err error, message string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: admitted", what)
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+admissionPolicy+"'"):
		t.Errorf("%s: want the refusal of ValidatingAdmissionPolicy %s, got %v", what, admissionPolicy, err)
	case !strings.Contains(err.Error(), message):
		t.Errorf("%s: refused, but not for %q: %v", what, message, err)
	}
}

// TestAdmissionPolicyRBACIntegration installs knative/'s RBAC and the admission-policy
// component into the real apiserver, and makes the functions' writes as their ServiceAccounts
// with reflector's own client: the reconcile-request annotation, status writes and the removal
// of Flux's finalizer from an object being deleted pass; a change of the spec, labels, owners,
// other annotations or other finalizers is refused, even for an identity whose RBAC would allow
// it, and so are creations and deletions. Other users' writes are not the policy's business.
func TestAdmissionPolicyRBACIntegration(t *testing.T) {
	env := testenv.Kube(t)
	installRBAC(t, env)
	fx := newFixture(t, env)
	installAdmissionPolicy(t, env)
	ctx := context.Background()

	const specPatch = `{"spec":{"image":"registry.example.com/tenant/other"}}`
	// The apiserver starts enforcing a new policy a moment after it is created. The probe is a
	// dry run: a patch admitted before then would change the spec, and every later one would
	// change nothing, which the policy admits.
	probe := impersonate(t, env, "reflector-scan").dynamic.Resource(repositories).Namespace(fx.ns)
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := probe.Patch(ctx, fx.repo, types.MergePatchType, []byte(specPatch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return errors.New("a spec patch by reflector-scan is still admitted")
		}
		if !strings.Contains(err.Error(), admissionPolicy) {
			return fmt.Errorf("a spec patch by reflector-scan: %w", err)
		}
		return nil
	})

	t.Run("the functions' writes pass", func(t *testing.T) {
		for _, sa := range []string{"reflector-webhook", "reflector-scan"} {
			c := kubeAs(t, env, sa)
			if _, err := c.Repositories.RequestReconcile(ctx, fx.ns, fx.repo, "admission-"+sa); err != nil {
				t.Errorf("%s: the reconcile-request annotation: %v", sa, err)
			}
			if _, err := c.Repositories.UpdateStatus(ctx, fx.ns, fx.repo, func(r *v1.ImageRepository) error {
				r.Status.LastHandledReconcileAt = "admission-" + sa
				return nil
			}); err != nil {
				t.Errorf("%s: the status: %v", sa, err)
			}
		}
		policy := kubeAs(t, env, "reflector-policy")
		if _, err := policy.Policies.UpdateStatus(ctx, fx.ns, fx.policy, func(p *v1.ImagePolicy) error {
			p.Status.ObservedGeneration = 7
			return nil
		}); err != nil {
			t.Errorf("reflector-policy: the status: %v", err)
		}
	})

	t.Run("other metadata and the spec are refused", func(t *testing.T) {
		for _, tc := range []struct {
			what, sa, patch, message string
			policy                   bool
		}{
			{"the spec of an ImageRepository", "reflector-scan", specPatch, "may not change the spec", false},
			{"the spec of an ImageRepository", "reflector-webhook", specPatch, "may not change the spec", false},
			{"the spec of an ImagePolicy", "reflector-policy", `{"spec":{"policy":{"semver":{"range":">=0.0.0"}}}}`, "may not change the spec", true},
			{"a label", "reflector-webhook", `{"metadata":{"labels":{"team":"other"}}}`, "may not change labels", false},
			{"an owner", "reflector-scan", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"kube-system","uid":"00000000-0000-0000-0000-000000000001"}]}}`, "owner references", false},
			{"another annotation", "reflector-webhook", `{"metadata":{"annotations":{"example.com/note":"planted"}}}`, "no annotation but reconcile.fluxcd.io/requestedAt", false},
			{"an annotation of an ImagePolicy", "reflector-policy", `{"metadata":{"annotations":{"example.com/note":"planted"}}}`, "no annotation but reconcile.fluxcd.io/requestedAt", true},
			{"a finalizer added", "reflector-scan", `{"metadata":{"finalizers":["finalizers.fluxcd.io"]}}`, "may only remove the finalizer", false},
		} {
			c := kubeAs(t, env, tc.sa)
			var err error
			if tc.policy {
				_, err = c.Policies.Patch(ctx, fx.ns, fx.policy, types.MergePatchType, []byte(tc.patch))
			} else {
				_, err = c.Repositories.Patch(ctx, fx.ns, fx.repo, types.MergePatchType, []byte(tc.patch))
			}
			refusedByPolicy(t, tc.sa+" changes "+tc.what, err, tc.message)
		}
	})

	// With every right RBAC can give, reflector's identity still writes only what its functions
	// write: the policy is what holds it, should a role be widened.
	t.Run("whatever RBAC allows", func(t *testing.T) {
		root := kubeAs(t, env, "reflector-scan", "system:masters")
		_, err := root.Repositories.Patch(ctx, fx.ns, fx.repo, types.MergePatchType, []byte(specPatch))
		refusedByPolicy(t, "reflector-scan as system:masters changes the spec", err, "may not change the spec")
		repo, err := root.Repositories.Get(ctx, fx.ns, fx.repo)
		if err != nil {
			t.Fatal(err)
		}
		planted := repo.DeepCopy()
		planted.ObjectMeta = metav1.ObjectMeta{Name: "planted", Namespace: fx.ns}
		_, err = root.Repositories.Create(ctx, planted)
		refusedByPolicy(t, "reflector-scan as system:masters creates an ImageRepository", err, "do not create or delete")
		err = root.Repositories.Delete(ctx, fx.ns, fx.repo)
		refusedByPolicy(t, "reflector-scan as system:masters deletes an ImageRepository", err, "do not create or delete")
	})

	t.Run("Flux's finalizer, from an object being deleted only", func(t *testing.T) {
		const other = "example.com/keep"
		admin := env.Dynamic().Resource(repositories).Namespace(fx.ns)
		held := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
			"metadata": map[string]any{"name": "held", "finalizers": []any{v1.ImageFinalizer, other}},
			"spec":     map[string]any{"image": "registry.example.com/team/held", "interval": "5m"},
		}}
		if _, err := admin.Create(ctx, held, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, err := admin.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("releasing ImageRepository held: %v", err)
			}
		})
		c := kubeAs(t, env, "reflector-scan")
		read := func() *v1.ImageRepository {
			t.Helper()
			r, err := c.Repositories.Get(ctx, fx.ns, "held")
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		_, err := c.Repositories.RemoveFinalizer(ctx, read(), v1.ImageFinalizer)
		refusedByPolicy(t, "removing Flux's finalizer from an object not being deleted", err, "may only remove the finalizer")

		if err := admin.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		removed, err := c.Repositories.RemoveFinalizer(ctx, read(), v1.ImageFinalizer)
		if err != nil || !removed {
			t.Fatalf("removing Flux's finalizer from an object being deleted: removed %v, %v", removed, err)
		}
		if got := read().Finalizers; len(got) != 1 || got[0] != other {
			t.Errorf("finalizers %v, want [%s]", got, other)
		}
		_, err = c.Repositories.RemoveFinalizer(ctx, read(), other)
		refusedByPolicy(t, "removing another's finalizer from an object being deleted", err, "may only remove the finalizer")
	})

	// Last, as it changes the fixture: the policy matches reflector's identities only.
	t.Run("other users", func(t *testing.T) {
		_, err := env.Dynamic().Resource(repositories).Namespace(fx.ns).
			Patch(ctx, fx.repo, types.MergePatchType, []byte(specPatch), metav1.PatchOptions{})
		if err != nil {
			t.Errorf("the admin's spec patch: %v", err)
		}
		other := rest.CopyConfig(env.Config)
		other.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:flux-system:image-reflector-controller", Groups: []string{"system:masters"}}
		c, err := kube.New(other)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Repositories.Patch(ctx, fx.ns, fx.repo, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"other"}}}`)); err != nil {
			t.Errorf("another ServiceAccount's label patch: %v", err)
		}
	})
}
