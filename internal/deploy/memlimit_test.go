package deploy

import (
	"testing"

	"github.com/imagereflector/reflector/internal/stack"
)

// The functions run with the memory limit and collector target of knative/ in the stack too, so
// that the stack's benchmarks measure the memory and latency the manifests give them.
func TestFunctionsRunWithTheStacksMemorySettings(t *testing.T) {
	seen := 0
	for _, obj := range build(t, placeholderImages()) {
		if obj.GetKind() != "Service" || obj.GetAPIVersion() != "serving.knative.dev/v1" {
			continue
		}
		seen++
		env := containerEnv(obj)
		if got := env["GOMEMLIMIT"]; got != stack.FunctionMemoryLimit {
			t.Errorf("%s: GOMEMLIMIT %q, want the stack's %q", obj.GetName(), got, stack.FunctionMemoryLimit)
		}
		if got := env["GOGC"]; got != stack.FunctionGCPercent {
			t.Errorf("%s: GOGC %q, want the stack's %q", obj.GetName(), got, stack.FunctionGCPercent)
		}
		want := ""
		if obj.GetName() == "reflector-policy" {
			want = stack.PolicySteadyGCPercent
		}
		if got := env["REFLECTOR_STEADY_GOGC"]; got != want {
			t.Errorf("%s: REFLECTOR_STEADY_GOGC %q, want %q as the stack runs it", obj.GetName(), got, want)
		}
	}
	if seen != 3 {
		t.Errorf("%d Knative Services in knative/, want the webhook, scan and policy functions", seen)
	}
}
