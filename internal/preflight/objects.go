package preflight

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// available tells whether the Deployment namespace/name exists with an available replica.
func available(ds []appsv1.Deployment, namespace, name string) bool {
	for _, d := range ds {
		if d.Namespace == namespace && d.Name == name && d.Status.AvailableReplicas > 0 {
			return true
		}
	}
	return false
}

// availableAnywhere tells whether a Deployment name of any namespace has an available replica.
func availableAnywhere(ds []appsv1.Deployment, name string) bool {
	for _, d := range ds {
		if d.Name == name && d.Status.AvailableReplicas > 0 {
			return true
		}
	}
	return false
}

// conditionTrue tells whether obj's status has the condition typ with status True.
func conditionTrue(obj *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}
