package preflight

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// defaultClassAnnotations mark the default StorageClass (the beta one is still honoured).
var defaultClassAnnotations = []string{"storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"}

// newDefaultClass makes a default StorageClass on EKS (the EBS CSI driver), the provider that
// has none from 1.30 on; GKE's standard-rwo is its default already.
const newDefaultClass = `kubectl apply -f - <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: gp3
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: ebs.csi.aws.com   # GKE: pd.csi.storage.gke.io; AKS: disk.csi.azure.com
parameters: {type: gp3}
volumeBindingMode: WaitForFirstConsumer
EOF`

// Storage checks that the tag store's claim can be provisioned: the class it names exists, or,
// when it names none (store.yaml's default), a default StorageClass exists. A bound claim
// passes whatever its class.
func Storage(classes []storagev1.StorageClass, claim *corev1.PersistentVolumeClaim) Result {
	const name = "StorageClass"
	if claim != nil && claim.Status.Phase == corev1.ClaimBound {
		return pass(name, "reflector-system/reflector-store is Bound")
	}
	if claim != nil && claim.Spec.StorageClassName != nil && *claim.Spec.StorageClassName != "" {
		want := *claim.Spec.StorageClassName
		for _, c := range classes {
			if c.Name == want {
				return pass(name, "reflector-store names "+want+", which exists")
			}
		}
		return fail(name, "reflector-store names the StorageClass "+want+", which does not exist", newDefaultClass)
	}
	for _, c := range classes {
		for _, a := range defaultClassAnnotations {
			if c.Annotations[a] == "true" {
				return pass(name, c.Name+" is the default ("+c.Provisioner+")")
			}
		}
	}
	if len(classes) > 0 {
		return fail(name, fmt.Sprintf("no default StorageClass among %d: the tag store's claim would stay Pending", len(classes)),
			"kubectl patch storageclass "+classes[0].Name+` -p '{"metadata":{"annotations":{"storageclass.kubernetes.io/is-default-class":"true"}}}'`)
	}
	return fail(name, "no StorageClass: the tag store's claim would stay Pending", newDefaultClass)
}
