//go:build tools

// The Eventing programs hack/knative.sh builds from this module; the import keeps their
// dependencies in go.mod and go.sum.
package tools

import (
	_ "knative.dev/eventing/cmd/controller"
	_ "knative.dev/eventing/cmd/webhook"
)
