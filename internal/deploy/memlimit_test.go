package deploy

import (
	"testing"

	"github.com/imagereflector/reflector/internal/stack"
)

// The functions run under the memory limit of knative/ in the stack too, so that the stack's
// benchmarks measure the memory the manifests give them.
func TestFunctionsRunUnderTheStacksMemoryLimit(t *testing.T) {
	seen := 0
	for _, obj := range build(t, placeholderImages()) {
		if obj.GetKind() != "Service" || obj.GetAPIVersion() != "serving.knative.dev/v1" {
			continue
		}
		seen++
		if got := containerEnv(obj)["GOMEMLIMIT"]; got != stack.FunctionMemoryLimit {
			t.Errorf("%s: GOMEMLIMIT %q, want the stack's %q", obj.GetName(), got, stack.FunctionMemoryLimit)
		}
	}
	if seen != 3 {
		t.Errorf("%d Knative Services in knative/, want the webhook, scan and policy functions", seen)
	}
}
