package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// verifySupported reads reflector_imagepolicy_crd_verify_supported from the process's registry.
func verifySupported(t *testing.T) (float64, bool) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "reflector_imagepolicy_crd_verify_supported" {
			return f.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// ownAPIServer starts an apiserver of the test's own, for a test that changes which ImagePolicy
// CRD is served: the shared one serves reflector's CRD to every other test.
func ownAPIServer(t *testing.T) (context.Context, *testenv.Env) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts etcd and kube-apiserver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	env, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	return ctx, env
}

// TestCheckPolicySchemaIntegration installs an ImagePolicy CRD without spec.verify, as Flux's
// is, into an apiserver of the test's own (the shared one serves reflector's CRD to every
// other test), and checks the log line, the metric and the Event; then reflector's CRD again.
func TestCheckPolicySchemaIntegration(t *testing.T) {
	ctx, env := ownAPIServer(t)
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

	flux, err := testenv.FluxCRD("imagepolicies")
	if err != nil {
		t.Fatal(err)
	}
	applied, err := env.Dynamic().Resource(crdGVR).Apply(ctx, flux.GetName(), flux, metav1.ApplyOptions{FieldManager: "flux", Force: true})
	if err != nil {
		t.Fatalf("applying Flux's CRD: %v", err)
	}

	c := env.Client(t)
	rec := kube.NewRecorder(c, "reflector-policy")
	defer rec.Shutdown()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	supported, err := reconcile.CheckPolicySchema(ctx, c, rec, log)
	if err != nil || supported {
		t.Fatalf("CheckPolicySchema = %v, %v; want false, nil", supported, err)
	}
	if v, ok := verifySupported(t); !ok || v != 0 {
		t.Errorf("reflector_imagepolicy_crd_verify_supported = %v (exported: %v), want 0", v, ok)
	}
	if !strings.Contains(logs.String(), `"level":"WARN"`) || !strings.Contains(logs.String(), "no spec.verify") {
		t.Errorf("no warning in the log: %s", logs.String())
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		list, err := env.Dynamic().Resource(schema.GroupVersionResource{Version: "v1", Resource: "events"}).
			Namespace(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=CustomResourceDefinition,involvedObject.name=" + kube.ImagePolicyCRD,
		})
		if err != nil {
			return err
		}
		for _, item := range list.Items {
			var e corev1.Event
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &e); err != nil {
				return err
			}
			if e.Type == corev1.EventTypeWarning && e.Reason == reconcile.ReasonVerifyNotServed &&
				e.InvolvedObject.UID == applied.GetUID() && strings.Contains(e.Message, "--components-extra=image-automation-controller") {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on the CRD among %d", reconcile.ReasonVerifyNotServed, len(list.Items))
	})

	if err := env.InstallCRDs(ctx); err != nil {
		t.Fatalf("reflector's CRDs again: %v", err)
	}
	logs.Reset()
	if supported, err := reconcile.CheckPolicySchema(ctx, c, rec, log); err != nil || !supported {
		t.Fatalf("CheckPolicySchema with reflector's CRD = %v, %v; want true, nil", supported, err)
	}
	if v, _ := verifySupported(t); v != 1 {
		t.Errorf("reflector_imagepolicy_crd_verify_supported = %v, want 1", v)
	}
	if strings.Contains(logs.String(), `"level":"WARN"`) {
		t.Errorf("a warning with reflector's CRD: %s", logs.String())
	}
}

// TestFluxPolicyCRDEvaluatedAgainIntegration evaluates a policy where the apiserver serves
// Flux's ImagePolicy CRD, which has no status.observedTagsRevision: the apiserver prunes the
// field from every status write, so the policy reads as never evaluated against a tag revision.
// It is then due again (DueTagsChanged), and evaluating it again gives the same answer, Ready:
// the missing field costs evaluations, never a wrong or stuck policy.
func TestFluxPolicyCRDEvaluatedAgainIntegration(t *testing.T) {
	ctx, env := ownAPIServer(t)
	if err := env.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	flux, err := testenv.FluxCRD("imagepolicies")
	if err != nil {
		t.Fatal(err)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := env.Dynamic().Resource(crdGVR).Apply(ctx, flux.GetName(), flux, metav1.ApplyOptions{FieldManager: "flux", Force: true}); err != nil {
		t.Fatalf("applying Flux's CRD: %v", err)
	}
	c := env.Client(t)
	// The apiserver serves the new schema once it has read the CRD again: a status field it
	// still keeps is the old schema's.
	testenv.Eventually(t, 30*time.Second, func() error {
		crd, err := c.CRD(ctx, kube.ImagePolicyCRD)
		if err != nil {
			return err
		}
		if kube.ServesVerify(crd) {
			return errors.New("the served ImagePolicy CRD is still reflector's")
		}
		return nil
	})

	repo, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
		Spec:       v1.ImageRepositorySpec{Image: "ghcr.io/org/app", Interval: metav1.Duration{Duration: time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := reconcile.RepositoryIdentity(repo)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writer, reader := store.New(dir, store.WithLinger(0)), store.New(dir, store.ReadOnly())
	defer writer.Close()
	defer reader.Close()
	entry, _, err := writer.Put(ctx, reconcile.StoreKey("default", "app"), id, []string{"1.0.0", "1.2.0"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
		Spec:       v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Name: "app"}, Policy: evaltest.Semver(">=1.0.0")},
	}); err != nil {
		t.Fatal(err)
	}
	rec := kube.NewRecorder(c, "reflector-policy")
	defer rec.Shutdown()
	ev := &reconcile.Evaluator{Kube: c, Store: reader, Registry: registry.New(registry.WithRateLimit(0, 0)), Recorder: rec}
	for round := range 2 {
		// A new Evaluator each round, as the cron reconciler's request reaches a new process:
		// none remembers the last round.
		ev := &reconcile.Evaluator{Kube: ev.Kube, Store: ev.Store, Registry: ev.Registry, Recorder: ev.Recorder}
		out, err := ev.Evaluate(ctx, "default", "app")
		if err != nil || out.Result != reconcile.PolicySucceeded || out.Latest == nil || out.Latest.Tag != "1.2.0" {
			t.Fatalf("round %d: Evaluate = %+v, %v; want 1.2.0", round, out, err)
		}
		p, err := c.Policies.Get(ctx, "default", "app")
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.ObservedTagsRevision != "" {
			t.Fatalf("round %d: status.observedTagsRevision %q kept by Flux's CRD", round, p.Status.ObservedTagsRevision)
		}
		if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "1.2.0" || !apimeta.IsStatusConditionTrue(p.Status.Conditions, v1.ReadyCondition) {
			t.Fatalf("round %d: status %+v; want latestRef 1.2.0 and Ready", round, p.Status)
		}
		if due := reconcile.PolicyDue(p, entry.Revision, reconcile.Window{Now: time.Now()}); due != reconcile.DueTagsChanged {
			t.Errorf("round %d: PolicyDue = %q, want %q", round, due, reconcile.DueTagsChanged)
		}
	}
}
