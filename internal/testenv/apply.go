package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/imagereflector/reflector/config/crd"
)

// fieldManager owns the fields that Apply sets.
const fieldManager = "reflector-testenv"

// InstallCRDs applies reflector's CRDs and waits until the apiserver serves them.
func (e *Env) InstallCRDs(ctx context.Context) error {
	files, err := fs.Glob(crd.Files, "bases/*.yaml")
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := crd.Files.ReadFile(f)
		if err != nil {
			return err
		}
		if _, err := e.Apply(ctx, "", b); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	for _, name := range []string{"imagerepositories.image.toolkit.fluxcd.io", "imagepolicies.image.toolkit.fluxcd.io"} {
		if err := e.waitEstablished(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func established(obj *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// Apply server-side applies every object of a multi-document YAML stream and returns them as the
// apiserver stored them. Namespaced objects without a namespace go to namespace (or "default").
func (e *Env) Apply(ctx context.Context, namespace string, manifests []byte) ([]*unstructured.Unstructured, error) {
	objs, err := DecodeYAML(manifests)
	if err != nil {
		return nil, err
	}
	resources := map[schema.GroupVersion]*metav1.APIResourceList{}
	var out []*unstructured.Unstructured
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := e.resourceOf(ctx, resources, gvk)
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		res := e.dynamic.Resource(gvk.GroupVersion().WithResource(mapping.Name))
		var client interface {
			Apply(context.Context, string, *unstructured.Unstructured, metav1.ApplyOptions, ...string) (*unstructured.Unstructured, error)
		} = res
		if mapping.Namespaced {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = namespace
			}
			if ns == "" {
				ns = "default"
			}
			obj.SetNamespace(ns)
			client = res.Namespace(ns)
		}
		applied, err := client.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		out = append(out, applied)
	}
	return out, nil
}

// resourceOf finds the resource of kind gvk in the apiserver's discovery document of its group
// version, which resources caches for one Apply. A group version read before a CRD applied by
// the same Apply was served is read again when the kind is missing from it.
func (e *Env) resourceOf(ctx context.Context, resources map[schema.GroupVersion]*metav1.APIResourceList, gvk schema.GroupVersionKind) (metav1.APIResource, error) {
	gv := gvk.GroupVersion()
	for range 2 {
		list := resources[gv]
		if list == nil {
			path := "/apis/" + gv.String()
			if gv.Group == "" {
				path = "/api/" + gv.Version
			}
			body, err := e.Get(ctx, path)
			if err != nil && !errors.Is(err, errNotServed) {
				return metav1.APIResource{}, err
			}
			list = &metav1.APIResourceList{}
			if err == nil {
				if err := json.Unmarshal(body, list); err != nil {
					return metav1.APIResource{}, fmt.Errorf("discovery of %s: %w", gv, err)
				}
			}
			resources[gv] = list
		}
		for _, r := range list.APIResources {
			if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
				return r, nil
			}
		}
		delete(resources, gv)
	}
	return metav1.APIResource{}, fmt.Errorf("the apiserver serves no kind %s in %s", gvk.Kind, gv)
}

// DecodeYAML splits a multi-document YAML stream into objects, skipping empty documents.
func DecodeYAML(manifests []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding manifests: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// ensureNamespace creates a namespace unless it exists.
func (e *Env) ensureNamespace(ctx context.Context, name string, labels map[string]string) error {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name},
	}}
	if len(labels) > 0 {
		ns.SetLabels(labels)
	}
	_, err := e.dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).
		Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// FluxCRD returns Flux's CRD of plural (imagerepositories or imagepolicies), as `make
// flux-crds` (hack/flux-crds.sh) generated it from Flux's API types into BinDir()/flux-crds.
// Tests apply it where a cluster serves Flux's CRDs instead of reflector's; Flux's ImagePolicy
// has no spec.verify.
func FluxCRD(plural string) (*unstructured.Unstructured, error) {
	path := filepath.Join(BinDir(), "flux-crds", "image.toolkit.fluxcd.io_"+plural+".yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("Flux's CRD: run `make flux-crds` to generate it (%w)", err)
	}
	objs, err := DecodeYAML(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(objs) != 1 || objs[0].GetKind() != "CustomResourceDefinition" || objs[0].GetName() != plural+".image.toolkit.fluxcd.io" {
		return nil, fmt.Errorf("%s holds %d objects, not the CRD %s.image.toolkit.fluxcd.io", path, len(objs), plural)
	}
	return objs[0], nil
}
