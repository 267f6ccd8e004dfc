// Package deploy checks the Knative deployment in knative/ against the real APIs it targets:
// the kustomize output is accepted by a kube-apiserver that serves the Knative Serving and
// Eventing CRDs, the ServiceAccounts can do their jobs and nothing more, and the images ko
// builds start. It also checks that docs/reference.md lists every setting and flag that the
// programs read. It holds tests only.
package deploy
