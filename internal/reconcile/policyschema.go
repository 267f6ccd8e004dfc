package reconcile

import (
	"context"
	"fmt"
	"log/slog"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/metrics"
)

// ReasonVerifyNotServed is the reason of the Warning Event that CheckPolicySchema records.
const ReasonVerifyNotServed = "VerifyNotServed"

// PolicySchemaFix is what an operator runs when the served ImagePolicy CRD is Flux's.
const PolicySchemaFix = "apply reflector's CRDs (kubectl apply --server-side --force-conflicts -f crds.yaml) " +
	"and leave image-reflector-controller out of Flux's components (flux install --components-extra=image-automation-controller); " +
	"reflector check says what else the cluster lacks"

// CheckPolicySchema reads the served ImagePolicy CRD and tells whether it declares
// spec.verify, recording the answer in a metric. When it does not, the CRD is Flux's (Flux
// applied its own again, or reflector's was never applied): the apiserver prunes spec.verify
// from every policy it stores, so that a policy that asked for signed images selects unsigned
// ones, which no evaluation can notice. It then says so in a Warning log line and a Warning
// Event on the CRD. Client-go's recorder writes the Events of a cluster-scoped object into the
// default namespace, where `kubectl describe crd imagepolicies.image.toolkit.fluxcd.io` and
// `kubectl get events -A` show them: the CRD is what must change, and an Event on one
// ImagePolicy would single out an object that is not to blame.
func CheckPolicySchema(ctx context.Context, c *kube.Client, rec *kube.Recorder, log *slog.Logger) (bool, error) {
	if log == nil {
		log = slog.Default()
	}
	crd, err := c.CRD(ctx, kube.ImagePolicyCRD)
	if err != nil {
		return false, fmt.Errorf("reading CustomResourceDefinition %s: %w", kube.ImagePolicyCRD, err)
	}
	supported := kube.ServesVerify(crd)
	metrics.SetPolicyVerifySupported(supported)
	if supported {
		log.Info("the served ImagePolicy CRD declares spec.verify", "crd", kube.ImagePolicyCRD)
		return true, nil
	}
	msg := "the served ImagePolicy CRD has no spec.verify (Flux's): the apiserver drops every policy's signature requirement, and policies select unsigned images; " + PolicySchemaFix
	log.Warn(msg, "crd", kube.ImagePolicyCRD)
	meta, _ := crd["metadata"].(map[string]any)
	uid, _ := meta["uid"].(string)
	rec.Warning(&metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: kube.ImagePolicyCRD, UID: types.UID(uid)},
	}, ReasonVerifyNotServed, msg)
	return false, nil
}
