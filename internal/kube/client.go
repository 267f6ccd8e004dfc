// Package kube is reflector's access to the Kubernetes API: typed clients for ImageRepository and
// ImagePolicy, the reconcile-request annotation, status patches that retry on conflict, and
// Kubernetes Events.
package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// Scheme knows the core Kubernetes types (Events, Secrets, ServiceAccounts, Status) and
// reflector's API. It registers only those: registering every built-in API group, as client-go's
// scheme does for its own clients, costs each cold start several milliseconds.
var Scheme = runtime.NewScheme()

func init() {
	if err := corev1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	if err := v1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
}

// Client reaches the Kubernetes API.
type Client struct {
	// Core is the typed client of the built-in resources (Secrets, ServiceAccounts, Events).
	Core kubernetes.Interface
	// Repositories reaches ImageRepository objects.
	Repositories *Objects[*v1.ImageRepository, *v1.ImageRepositoryList]
	// Policies reaches ImagePolicy objects.
	Policies *Objects[*v1.ImagePolicy, *v1.ImagePolicyList]
}

// New returns a Client for the API server that cfg points at.
func New(cfg *rest.Config) (*Client, error) {
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := *cfg
	c.GroupVersion = &v1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(&c)
	if err != nil {
		return nil, err
	}
	return &Client{
		Core: core,
		Repositories: &Objects[*v1.ImageRepository, *v1.ImageRepositoryList]{
			rest: rc, resource: v1.ImageRepositoryResource,
			newObj:  func() *v1.ImageRepository { return &v1.ImageRepository{} },
			newList: func() *v1.ImageRepositoryList { return &v1.ImageRepositoryList{} },
		},
		Policies: &Objects[*v1.ImagePolicy, *v1.ImagePolicyList]{
			rest: rc, resource: v1.ImagePolicyResource,
			newObj:  func() *v1.ImagePolicy { return &v1.ImagePolicy{} },
			newList: func() *v1.ImagePolicyList { return &v1.ImagePolicyList{} },
		},
	}, nil
}

// Connect opens the connection to the API server ahead of the first request that needs it: a
// process started for a request then does not pay the TLS handshake on that request's path. It
// reads /version, which every authenticated client may, for at most connectTimeout; its errors
// are left to the requests that follow.
func (c *Client) Connect(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	_ = c.Core.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error()
}

// connectTimeout bounds Connect.
const connectTimeout = 10 * time.Second

// Object is an API object of reflector's group.
type Object interface {
	runtime.Object
	metav1.Object
}

// Objects is a typed client of one resource of reflector's API group.
type Objects[T Object, L runtime.Object] struct {
	rest     rest.Interface
	resource string
	newObj   func() T
	newList  func() L
}

// Get returns the object namespace/name.
func (o *Objects[T, L]) Get(ctx context.Context, namespace, name string) (T, error) {
	out := o.newObj()
	err := o.rest.Get().Namespace(namespace).Resource(o.resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// List lists objects of one namespace, or of all namespaces when namespace is empty. Pages
// walks large sets page by page.
func (o *Objects[T, L]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (L, error) {
	out := o.newList()
	err := o.rest.Get().Namespace(namespace).Resource(o.resource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// DefaultPageSize is the number of objects a list call asks for when its caller sets none.
const DefaultPageSize = 500

// Pages lists like List, opts.Limit objects a call (DefaultPageSize when it is not positive),
// following each page's continue token, and calls each with every page in turn; it stops at the
// first error, its own or each's.
func (o *Objects[T, L]) Pages(ctx context.Context, namespace string, opts metav1.ListOptions, each func(L) error) error {
	if opts.Limit <= 0 {
		opts.Limit = DefaultPageSize
	}
	for {
		page, err := o.List(ctx, namespace, opts)
		if err != nil {
			return err
		}
		if err := each(page); err != nil {
			return err
		}
		if opts.Continue = any(page).(metav1.ListInterface).GetContinue(); opts.Continue == "" {
			return nil
		}
		// The continue token carries the resource version of the first page.
		opts.ResourceVersion = ""
	}
}

// Create creates obj in its namespace.
func (o *Objects[T, L]) Create(ctx context.Context, obj T) (T, error) {
	out := o.newObj()
	err := o.rest.Post().Namespace(obj.GetNamespace()).Resource(o.resource).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj; the apiserver refuses it with a conflict when obj is stale.
func (o *Objects[T, L]) Update(ctx context.Context, obj T) (T, error) {
	out := o.newObj()
	err := o.rest.Put().Namespace(obj.GetNamespace()).Resource(o.resource).Name(obj.GetName()).
		Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes namespace/name.
func (o *Objects[T, L]) Delete(ctx context.Context, namespace, name string) error {
	return o.rest.Delete().Namespace(namespace).Resource(o.resource).Name(name).Do(ctx).Error()
}

// Patch patches namespace/name, or one of its subresources such as "status".
func (o *Objects[T, L]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, subresource ...string) (T, error) {
	out := o.newObj()
	err := o.rest.Patch(pt).Namespace(namespace).Resource(o.resource).Name(name).
		SubResource(subresource...).Body(data).Do(ctx).Into(out)
	if err != nil {
		return out, fmt.Errorf("patching %s %s/%s: %w", o.resource, namespace, name, err)
	}
	return out, nil
}
