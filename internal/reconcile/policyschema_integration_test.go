package reconcile_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/reconcile"
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

// TestCheckPolicySchemaIntegration installs an ImagePolicy CRD without spec.verify, as Flux's
// is, into an apiserver of the test's own (the shared one serves reflector's CRD to every
// other test), and checks the log line, the metric and the Event; then reflector's CRD again.
func TestCheckPolicySchemaIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts etcd and kube-apiserver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	defer env.Stop()
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
