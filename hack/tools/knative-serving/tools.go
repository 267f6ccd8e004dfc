//go:build tools

// The Serving programs hack/knative.sh builds from this module; the import keeps their
// requirements in go.mod.
package tools

import (
	_ "knative.dev/serving/cmd/controller"
	_ "knative.dev/serving/cmd/webhook"
)
