package kube

import (
	"context"
	"encoding/json"
	"fmt"
)

// ImagePolicyCRD is the name of the CustomResourceDefinition that serves ImagePolicies.
const ImagePolicyCRD = "imagepolicies.image.toolkit.fluxcd.io"

// CRD reads the CustomResourceDefinition name as plain JSON fields: the apiextensions types
// are not linked into the functions for one read at start.
func (c *Client) CRD(ctx context.Context, name string) (map[string]any, error) {
	b, err := c.core.Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", name).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var crd map[string]any
	if err := json.Unmarshal(b, &crd); err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition %s: %w", name, err)
	}
	return crd, nil
}

// ServesVerify tells whether the ImagePolicy CRD crd serves a v1 schema that declares
// spec.verify. reflector's does; Flux's does not, and the apiserver then prunes the field from
// every policy it stores, so that a policy that asked for signed images selects unsigned ones.
func ServesVerify(crd map[string]any) bool {
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	for _, v := range versions {
		ver, _ := v.(map[string]any)
		if ver["name"] != "v1" || ver["served"] != true {
			continue
		}
		_, ok := dig(ver, "schema", "openAPIV3Schema", "properties", "spec", "properties", "verify").(map[string]any)
		return ok
	}
	return false
}

// dig follows keys through nested JSON objects; nil when one is missing.
func dig(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = obj[k]
	}
	return cur
}
