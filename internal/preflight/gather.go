package preflight

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

const reflectorNamespace = "reflector-system"

var (
	crdResource     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	brokerResource  = schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "brokers"}
	serviceResource = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
)

// configMaps are the ConfigMaps the checks read, as namespace and name.
var configMaps = [][2]string{
	{servingNamespace, "config-features"},
	{servingNamespace, "config-network"},
	{eventingNamespace, "config-features"},
	{eventingNamespace, "config-br-defaults"},
}

// Gather reads what the checks look at. An object that does not exist is left out; any other
// error (a refused permission, an unreachable apiserver) ends the reading.
func Gather(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface) (*Cluster, error) {
	c := &Cluster{CRDs: map[string]*unstructured.Unstructured{}, ConfigMaps: map[string]*corev1.ConfigMap{}}
	var err error
	if c.Version, err = kc.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("the apiserver's version: %w", err)
	}
	for _, name := range []string{ServingCRD, BrokerCRD, RepositoryCRD, PolicyCRD} {
		crd, err := dc.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("CustomResourceDefinition %s: %w", name, err)
		}
		c.CRDs[name] = crd
	}
	for _, nn := range configMaps {
		cm, err := kc.CoreV1().ConfigMaps(nn[0]).Get(ctx, nn[1], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %w", nn[0], nn[1], err)
		}
		c.ConfigMaps[nn[0]+"/"+nn[1]] = cm
	}
	deployments, err := kc.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("Deployments: %w", err)
	}
	c.Deployments = deployments.Items
	classes, err := kc.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("StorageClasses: %w", err)
	}
	c.StorageClasses = classes.Items
	claim, err := kc.CoreV1().PersistentVolumeClaims(reflectorNamespace).Get(ctx, "reflector-store", metav1.GetOptions{})
	switch {
	case err == nil:
		c.StoreClaim = claim
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("PersistentVolumeClaim %s/reflector-store: %w", reflectorNamespace, err)
	}
	if c.CRDs[BrokerCRD] != nil {
		if c.Broker, err = getObject(ctx, dc, brokerResource, "default"); err != nil {
			return nil, err
		}
	}
	if c.CRDs[ServingCRD] != nil {
		if c.WebhookService, err = getObject(ctx, dc, serviceResource, "reflector-webhook"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// getObject reads reflector-system's object name of res; nil when it does not exist.
func getObject(ctx context.Context, dc dynamic.Interface, res schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	obj, err := dc.Resource(res).Namespace(reflectorNamespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", res.Resource, reflectorNamespace, name, err)
	}
	return obj, nil
}
