package v1_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func client(t *testing.T) (*testenv.Env, *kube.Client) {
	t.Helper()
	env := testenv.Kube(t)
	c := env.Client(t)
	return env, c
}

func TestAPIIntegrationExamples(t *testing.T) {
	env, c := client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	files, err := filepath.Glob("../../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := env.Apply(ctx, ns, b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			kinds[o.GetKind()]++
		}
	}
	if kinds["ImageRepository"] < 1 || kinds["ImagePolicy"] < 3 {
		t.Fatalf("examples hold %v, want an ImageRepository and an ImagePolicy per policy kind", kinds)
	}

	repo, err := c.Repositories.Get(ctx, ns, "podinfo")
	if err != nil {
		t.Fatal(err)
	}
	if got := repo.Spec.ExclusionList; len(got) != 1 || got[0] != `^.*\.sig$` {
		t.Errorf("default exclusionList = %q", got)
	}
	if repo.Spec.Provider != "generic" {
		t.Errorf("default provider = %q", repo.Spec.Provider)
	}
	if repo.Status.LastScanResult != nil {
		t.Errorf("a new ImageRepository has lastScanResult %+v", repo.Status.LastScanResult)
	}

	semver, err := c.Policies.Get(ctx, ns, "podinfo-semver")
	if err != nil {
		t.Fatal(err)
	}
	if semver.Spec.DigestReflectionPolicy != v1.ReflectNever {
		t.Errorf("default digestReflectionPolicy = %q", semver.Spec.DigestReflectionPolicy)
	}

	objs, err := env.Apply(ctx, ns, []byte(`{"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": {"name": "verified"},
		"spec": {"imageRepositoryRef": {"name": "podinfo"}, "policy": {"semver": {"range": "1.x"}}, "verify": {"secretRef": {"name": "cosign-keys"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	verified, err := c.Policies.Get(ctx, ns, objs[0].GetName())
	if err != nil {
		t.Fatal(err)
	}
	if v := verified.Spec.Verify; v == nil || v.Provider != v1.VerificationProviderCosign || v.SecretRef == nil || v.SecretRef.Name != "cosign-keys" {
		t.Errorf("spec.verify = %+v, want provider cosign by default and the secretRef", v)
	}

	defaulted, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "order-default"},
		Spec: v1.ImagePolicySpec{
			ImageRepositoryRef: v1.NamespacedObjectReference{Name: "podinfo"},
			Policy: v1.ImagePolicyChoice{
				Alphabetical: &v1.AlphabeticalPolicy{},
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if defaulted.Spec.Policy.Alphabetical.Order != "asc" {
		t.Errorf("default alphabetical order = %q", defaulted.Spec.Policy.Alphabetical.Order)
	}
	num, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "numerical-default"},
		Spec: v1.ImagePolicySpec{
			ImageRepositoryRef: v1.NamespacedObjectReference{Name: "podinfo"},
			Policy:             v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if num.Spec.Policy.Numerical.Order != "asc" {
		t.Errorf("default numerical order = %q", num.Spec.Policy.Numerical.Order)
	}
}

// TestAPIIntegrationValidation sends invalid objects and checks that the apiserver refuses each
// with its own message naming the field and the rule.
func TestAPIIntegrationValidation(t *testing.T) {
	env, _ := client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	long := `["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17","18","19","20","21","22","23","24","25","26"]`
	tests := []struct {
		name     string
		manifest string
		want     []string
	}{
		{
			name:     "missing image",
			manifest: repoYAML(`{"interval": "5m"}`),
			want:     []string{"spec.image: Required value"},
		},
		{
			name:     "missing interval",
			manifest: repoYAML(`{"image": "alpine"}`),
			want:     []string{"spec.interval: Required value"},
		},
		{
			name:     "bad interval pattern",
			manifest: repoYAML(`{"image": "alpine", "interval": "5 minutes"}`),
			want:     []string{`spec.interval: Invalid value: "5 minutes": spec.interval in body should match '^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$'`},
		},
		{
			name:     "hours in timeout",
			manifest: repoYAML(`{"image": "alpine", "interval": "5m", "timeout": "1h"}`),
			want:     []string{`spec.timeout: Invalid value: "1h": spec.timeout in body should match '^([0-9]+(\.[0-9]+)?(ms|s|m))+$'`},
		},
		{
			name:     "26 exclusions",
			manifest: repoYAML(`{"image": "alpine", "interval": "5m", "exclusionList": ` + long + `}`),
			want:     []string{"spec.exclusionList: Too many: 26: must have at most 25 items"},
		},
		{
			name:     "unknown provider",
			manifest: repoYAML(`{"image": "alpine", "interval": "5m", "provider": "oracle"}`),
			want:     []string{`spec.provider: Unsupported value: "oracle": supported values: "generic", "aws", "azure", "gcp"`},
		},
		{
			name:     "interval without Always",
			manifest: policyYAML(`"policy": {"semver": {"range": "1.x"}}, "interval": "5m"`),
			want:     []string{"spec: Invalid value: spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'"},
		},
		{
			name:     "interval with IfNotPresent",
			manifest: policyYAML(`"policy": {"semver": {"range": "1.x"}}, "digestReflectionPolicy": "IfNotPresent", "interval": "5m"`),
			want:     []string{"spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'"},
		},
		{
			name:     "Always without interval",
			manifest: policyYAML(`"policy": {"semver": {"range": "1.x"}}, "digestReflectionPolicy": "Always"`),
			want:     []string{"spec: Invalid value: spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'"},
		},
		{
			name:     "bad order",
			manifest: policyYAML(`"policy": {"alphabetical": {"order": "up"}}`),
			want:     []string{`spec.policy.alphabetical.order: Unsupported value: "up": supported values: "asc", "desc"`},
		},
		{
			name:     "bad numerical order",
			manifest: policyYAML(`"policy": {"numerical": {"order": "ASC"}}`),
			want:     []string{`spec.policy.numerical.order: Unsupported value: "ASC": supported values: "asc", "desc"`},
		},
		{
			name:     "bad reflection policy",
			manifest: policyYAML(`"policy": {"semver": {"range": "1.x"}}, "digestReflectionPolicy": "Sometimes"`),
			want:     []string{`spec.digestReflectionPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"`},
		},
		{
			name:     "unknown verification provider",
			manifest: policyYAML(`"policy": {"semver": {"range": "1.x"}}, "verify": {"provider": "gpg", "secretRef": {"name": "keys"}}`),
			want:     []string{`spec.verify.provider: Unsupported value: "gpg": supported values: "cosign", "notation"`},
		},
		{
			name:     "identity without subject",
			manifest: policyYAML(`"policy": {"semver": {"range": "1.x"}}, "verify": {"matchOIDCIdentity": [{"issuer": ".*"}]}`),
			want:     []string{"spec.verify.matchOIDCIdentity[0].subject: Required value"},
		},
		{
			name:     "missing repository reference",
			manifest: `{"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": {"name": "bad"}, "spec": {"policy": {"semver": {"range": "1.x"}}}}`,
			want:     []string{"spec.imageRepositoryRef: Required value"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := env.Apply(ctx, ns, []byte(tt.manifest))
			if err == nil {
				t.Fatal("the apiserver accepted the object")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func repoYAML(spec string) string {
	return `{"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository", "metadata": {"name": "bad"}, "spec": ` + spec + `}`
}

func policyYAML(spec string) string {
	return `{"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy", "metadata": {"name": "bad"}, "spec": {"imageRepositoryRef": {"name": "r"}, ` + spec + `}}`
}

func TestAPIIntegrationStatusSubresource(t *testing.T) {
	env, c := client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	repo, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.ImageRepositorySpec{
			Image:    "ghcr.io/org/app",
			Interval: metav1.Duration{Duration: 5 * time.Minute},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := env.Dynamic().Resource(v1.GroupVersion.WithResource(v1.ImageRepositoryResource)).
		Namespace(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(raw.Object, "status", "lastScanResult"); found {
		t.Error("the apiserver stores a new ImageRepository with lastScanResult")
	}
	if og, _, _ := unstructured.NestedInt64(raw.Object, "status", "observedGeneration"); og != -1 {
		t.Errorf("default status.observedGeneration = %d, want -1", og)
	}

	scanTime := metav1.NewTime(time.Now().Truncate(time.Second))
	updated, err := c.Repositories.UpdateStatus(ctx, ns, "app", func(r *v1.ImageRepository) error {
		r.Spec.Image = "ghcr.io/org/other" // the status subresource must ignore this
		r.Status.ObservedGeneration = r.Generation
		r.Status.CanonicalImageName = "ghcr.io/org/app"
		r.Status.LastScanResult = &v1.ScanResult{Revision: "abc", TagCount: 2, ScanTime: scanTime, LatestTags: []string{"v2", "v1"}}
		r.Status.Conditions = []metav1.Condition{{
			Type: v1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1.SucceededReason,
			Message: "successful scan: found 2 tags", LastTransitionTime: scanTime,
		}}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Spec.Image != "ghcr.io/org/app" {
		t.Errorf("a status write changed spec.image to %q", updated.Spec.Image)
	}
	got := updated.Status.LastScanResult
	if got == nil || got.TagCount != 2 || got.Revision != "abc" || !got.ScanTime.Equal(&scanTime) {
		t.Errorf("lastScanResult = %+v", got)
	}
	if updated.Status.ObservedGeneration != repo.Generation {
		t.Errorf("observedGeneration = %d, want %d", updated.Status.ObservedGeneration, repo.Generation)
	}

	// A write based on a stale read is refused rather than lost in silence.
	stale := repo.DeepCopy()
	stale.Status.CanonicalImageName = "stale"
	if _, err := c.Repositories.PatchStatus(ctx, repo, stale); !apierrors.IsConflict(err) {
		t.Errorf("a stale status write: want a conflict, got %v", err)
	}

	// Clearing a field removes it.
	cleared, err := c.Repositories.UpdateStatus(ctx, ns, "app", func(r *v1.ImageRepository) error {
		r.Status.LastScanResult = nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cleared.Status.LastScanResult != nil || cleared.Status.CanonicalImageName != "ghcr.io/org/app" {
		t.Errorf("after clearing lastScanResult: %+v", cleared.Status)
	}

	// The reconcile-request annotation goes to metadata, and status keeps what it had.
	annotated, err := c.Repositories.RequestReconcile(ctx, ns, "app", testenv.RequestToken(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kube.ReconcileRequest(annotated.Annotations); !ok {
		t.Error("reconcile annotation not set")
	}
}

// The policy function asks for the ImagePolicies of one repository by field selector rather
// than listing every policy of the cluster.
func TestAPIIntegrationPolicyRepositoryRefIsSelectable(t *testing.T) {
	env, c := client(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	for name, repo := range map[string]string{"a1": "app", "a2": "app", "o1": "other"} {
		_, err := c.Policies.Create(ctx, &v1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.ImagePolicySpec{
				ImageRepositoryRef: v1.NamespacedObjectReference{Name: repo},
				Policy:             v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	list, err := c.Policies.List(ctx, ns, metav1.ListOptions{FieldSelector: "spec.imageRepositoryRef.name=app"})
	if err != nil {
		t.Fatalf("listing by spec.imageRepositoryRef.name: %v", err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "a1,a2" {
		t.Errorf("selected %v, want a1 and a2", names)
	}
}

// TestAPIIntegrationVerifyIsExplained reads the OpenAPI v3 document that `kubectl explain`
// reads, and finds spec.verify described in it.
func TestAPIIntegrationVerifyIsExplained(t *testing.T) {
	env, _ := client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var doc []byte
	testenv.Eventually(t, 20*time.Second, func() error {
		var err error
		doc, err = clientset.For(env).Discovery().RESTClient().Get().AbsPath("/openapi/v3/apis/image.toolkit.fluxcd.io/v1").DoRaw(ctx)
		if err == nil && !strings.Contains(string(doc), "matchOIDCIdentity") {
			err = errors.New("the OpenAPI document does not describe spec.verify yet")
		}
		return err
	})
	for _, want := range []string{
		"Verify lets only images whose signature verifies become the latest",
		"Provider specifies the technology used to sign the",
		"SecretRef specifies the Kubernetes Secret containing the trusted public keys",
		"Issuer specifies the regex pattern",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the OpenAPI document of image.toolkit.fluxcd.io/v1 does not say %q", want)
		}
	}
}
