// Command adapter is Knative Eventing's ApiServerSource receive adapter
// (knative.dev/eventing/cmd/apiserver_receive_adapter) with its health probe server turned
// off. Knative's binary binds port 8080 for kubelet probes, which cannot be moved; outside a
// pod there is no kubelet, and several adapters (make run, parallel test packages) must run on
// one host. Everything else is Knative's own code, configured by the same environment.
package main

import (
	filteredFactory "knative.dev/pkg/client/injection/kube/informers/factory/filtered"
	"knative.dev/pkg/signals"

	"knative.dev/eventing/pkg/adapter/apiserver"
	adapter "knative.dev/eventing/pkg/adapter/v2"
	"knative.dev/eventing/pkg/auth"
	"knative.dev/eventing/pkg/eventingtls"
)

func main() {
	ctx := signals.NewContext()
	ctx = adapter.WithInjectorEnabled(ctx)
	ctx = adapter.WithHealthProbesDisabled(ctx)
	ctx = filteredFactory.WithSelectors(ctx,
		auth.OIDCLabelSelector,
		eventingtls.TrustBundleLabelSelector,
	)
	adapter.MainWithContext(ctx, "apiserversource", apiserver.NewEnvConfig, apiserver.NewAdapter)
}
