package kube

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config returns the client configuration of a process: the kubeconfig file when path is set,
// else $KUBECONFIG or ~/.kube/config, else the in-cluster service account.
func Config(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "reflector"
	// client-go's default of 5 requests a second (burst 10) queued every webhook behind the
	// Events and status writes of the last ones; these are the limits Flux's controllers use.
	cfg.QPS, cfg.Burst = 50, 300
	return cfg, nil
}
