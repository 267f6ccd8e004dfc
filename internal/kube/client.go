// Package kube is reflector's access to the Kubernetes API: typed clients for ImageRepository,
// ImagePolicy and the few built-in resources reflector reads or writes, the reconcile-request
// annotation, status patches that retry on conflict, and Kubernetes Events.
package kube

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// Scheme knows the core Kubernetes types (Events, Secrets, ServiceAccounts, Namespaces, Status),
// TokenReview and TokenRequest, and reflector's API. It registers only those: registering every
// built-in API group, as client-go's scheme does for its generated clientset, costs each cold
// start several milliseconds, and linking that clientset costs more.
var Scheme = runtime.NewScheme()

func init() {
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, authnv1.AddToScheme, v1.AddToScheme} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
}

// Client reaches the Kubernetes API.
type Client struct {
	// Secrets reaches Secrets.
	Secrets *Objects[*corev1.Secret, *corev1.SecretList]
	// ServiceAccounts reaches ServiceAccounts and requests their tokens.
	ServiceAccounts *ServiceAccounts
	// Namespaces reaches Namespaces; they belong to no namespace, so calls pass "" for it.
	Namespaces *Objects[*corev1.Namespace, *corev1.NamespaceList]
	// Events reaches Events; Recorder writes them.
	Events *Objects[*corev1.Event, *corev1.EventList]
	// TokenReviews asks the apiserver who a bearer token belongs to.
	TokenReviews *TokenReviews
	// Repositories reaches ImageRepository objects.
	Repositories *Objects[*v1.ImageRepository, *v1.ImageRepositoryList]
	// Policies reaches ImagePolicy objects.
	Policies *Objects[*v1.ImagePolicy, *v1.ImagePolicyList]

	// core is the REST client of the core API group, version v1.
	core rest.Interface
}

// New returns a Client for the API server that cfg points at. All its REST clients share one
// HTTP client, so one connection serves them all. The built-in API groups share one rate
// limiter and reflector's group has another, as when the built-in ones were reached through
// client-go's clientset.
func New(cfg *rest.Config) (*Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	builtin := *cfg
	if builtin.RateLimiter == nil && builtin.QPS > 0 {
		if builtin.Burst <= 0 {
			return nil, fmt.Errorf("a QPS of %v needs a positive burst", builtin.QPS)
		}
		builtin.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(builtin.QPS, builtin.Burst)
	}
	// Scheme encodes and decodes, without conversion between versions.
	codecs := serializer.NewCodecFactory(Scheme).WithoutConversion()
	core, err := restClient(&builtin, hc, codecs, "/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	authn, err := restClient(&builtin, hc, codecs, "/apis", authnv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	own, err := restClient(cfg, hc, codecs, "/apis", v1.GroupVersion)
	if err != nil {
		return nil, err
	}
	return &Client{
		Secrets: &Objects[*corev1.Secret, *corev1.SecretList]{
			rest: core, resource: "secrets",
			newObj:  func() *corev1.Secret { return &corev1.Secret{} },
			newList: func() *corev1.SecretList { return &corev1.SecretList{} },
		},
		ServiceAccounts: &ServiceAccounts{&Objects[*corev1.ServiceAccount, *corev1.ServiceAccountList]{
			rest: core, resource: "serviceaccounts",
			newObj:  func() *corev1.ServiceAccount { return &corev1.ServiceAccount{} },
			newList: func() *corev1.ServiceAccountList { return &corev1.ServiceAccountList{} },
		}},
		Namespaces: &Objects[*corev1.Namespace, *corev1.NamespaceList]{
			rest: core, resource: "namespaces",
			newObj:        func() *corev1.Namespace { return &corev1.Namespace{} },
			newList:       func() *corev1.NamespaceList { return &corev1.NamespaceList{} },
			clusterScoped: true,
		},
		Events: &Objects[*corev1.Event, *corev1.EventList]{
			rest: core, resource: "events",
			newObj:  func() *corev1.Event { return &corev1.Event{} },
			newList: func() *corev1.EventList { return &corev1.EventList{} },
		},
		TokenReviews: &TokenReviews{rest: authn},
		Repositories: &Objects[*v1.ImageRepository, *v1.ImageRepositoryList]{
			rest: own, resource: v1.ImageRepositoryResource,
			newObj:  func() *v1.ImageRepository { return &v1.ImageRepository{} },
			newList: func() *v1.ImageRepositoryList { return &v1.ImageRepositoryList{} },
		},
		Policies: &Objects[*v1.ImagePolicy, *v1.ImagePolicyList]{
			rest: own, resource: v1.ImagePolicyResource,
			newObj:  func() *v1.ImagePolicy { return &v1.ImagePolicy{} },
			newList: func() *v1.ImagePolicyList { return &v1.ImagePolicyList{} },
		},
		core: core,
	}, nil
}

// restClient returns a REST client of one API group version.
func restClient(cfg *rest.Config, hc *http.Client, codecs runtime.NegotiatedSerializer, apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := *cfg
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = codecs
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(&c, hc)
}

// Connect opens the connection to the API server ahead of the first request that needs it: a
// process started for a request then does not pay the TLS handshake on that request's path. It
// reads /version, which every authenticated client may, for at most connectTimeout; its errors
// are left to the requests that follow.
func (c *Client) Connect(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	_ = c.core.Get().AbsPath("/version").Do(ctx).Error()
}

// connectTimeout bounds Connect.
const connectTimeout = 10 * time.Second

// ServiceAccountKeys returns the public keys that verify the cluster's ServiceAccount tokens, the
// JSON Web Key Set the apiserver publishes for OIDC discovery (/openid/v1/jwks), which every
// ServiceAccount may read. An answer of more than maxKeySetBytes is an error.
func (c *Client) ServiceAccountKeys(ctx context.Context) ([]byte, error) {
	body, err := c.core.Get().AbsPath("/openid/v1/jwks").Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxKeySetBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeySetBytes {
		return nil, fmt.Errorf("the apiserver's key set is larger than %d bytes", maxKeySetBytes)
	}
	return b, nil
}

// maxKeySetBytes bounds the key set: a key is under 1 KiB, and a cluster has a few.
const maxKeySetBytes = 256 << 10

// ServiceAccounts is the typed client of ServiceAccounts, with their token subresource.
type ServiceAccounts struct {
	*Objects[*corev1.ServiceAccount, *corev1.ServiceAccountList]
}

// CreateToken requests a token for the ServiceAccount namespace/name (the TokenRequest API).
func (s *ServiceAccounts) CreateToken(ctx context.Context, namespace, name string, req *authnv1.TokenRequest) (*authnv1.TokenRequest, error) {
	out := &authnv1.TokenRequest{}
	err := s.rest.Post().Namespace(namespace).Resource(s.resource).Name(name).SubResource("token").
		Body(req).Do(ctx).Into(out)
	return out, err
}

// TokenReviews is the typed client of TokenReviews.
type TokenReviews struct {
	rest rest.Interface
}

// Create submits review and returns it with the apiserver's answer in its status.
func (t *TokenReviews) Create(ctx context.Context, review *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	out := &authnv1.TokenReview{}
	err := t.rest.Post().Resource("tokenreviews").Body(review).Do(ctx).Into(out)
	return out, err
}

// Object is an API object of reflector's group.
type Object interface {
	runtime.Object
	metav1.Object
}

// Objects is a typed client of one resource. The calls of a resource that belongs to no
// namespace, such as Namespaces, pass "" for the namespace.
type Objects[T Object, L runtime.Object] struct {
	rest     rest.Interface
	resource string
	newObj   func() T
	newList  func() L
	// clusterScoped marks a resource that belongs to no namespace; calls ignore the namespace
	// they are given.
	clusterScoped bool
}

// Get returns the object namespace/name.
func (o *Objects[T, L]) Get(ctx context.Context, namespace, name string) (T, error) {
	out := o.newObj()
	err := o.rest.Get().NamespaceIfScoped(namespace, !o.clusterScoped).Resource(o.resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// List lists objects of one namespace, or of all namespaces when namespace is empty. Pages
// walks large sets page by page.
func (o *Objects[T, L]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (L, error) {
	out := o.newList()
	err := o.rest.Get().NamespaceIfScoped(namespace, !o.clusterScoped).Resource(o.resource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch watches objects of one namespace, or of all namespaces when namespace is empty.
func (o *Objects[T, L]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return o.rest.Get().NamespaceIfScoped(namespace, !o.clusterScoped).Resource(o.resource).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
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
	err := o.rest.Post().NamespaceIfScoped(obj.GetNamespace(), !o.clusterScoped).Resource(o.resource).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj; the apiserver refuses it with a conflict when obj is stale.
func (o *Objects[T, L]) Update(ctx context.Context, obj T) (T, error) {
	out := o.newObj()
	err := o.rest.Put().NamespaceIfScoped(obj.GetNamespace(), !o.clusterScoped).Resource(o.resource).Name(obj.GetName()).
		Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes namespace/name.
func (o *Objects[T, L]) Delete(ctx context.Context, namespace, name string) error {
	return o.rest.Delete().NamespaceIfScoped(namespace, !o.clusterScoped).Resource(o.resource).Name(name).Do(ctx).Error()
}

// Patch patches namespace/name with data, a patch of type pt.
func (o *Objects[T, L]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) (T, error) {
	return o.patch(ctx, o.rest.Patch(pt), namespace+"/"+name, data)
}

// MergeStatus patches the status subresource of namespace/name with data, a JSON merge patch.
func (o *Objects[T, L]) MergeStatus(ctx context.Context, namespace, name string, data []byte) (T, error) {
	return o.patch(ctx, o.rest.Patch(types.MergePatchType).SubResource("status"), namespace+"/"+name, data)
}

// patch sends req, a patch request, for key ("namespace/name") with body data.
func (o *Objects[T, L]) patch(ctx context.Context, req *rest.Request, key string, data []byte) (T, error) {
	namespace, name, _ := strings.Cut(key, "/")
	out := o.newObj()
	err := req.NamespaceIfScoped(namespace, !o.clusterScoped).Resource(o.resource).Name(name).Body(data).Do(ctx).Into(out)
	if err != nil {
		return out, fmt.Errorf("patching %s %s: %w", o.resource, key, err)
	}
	return out, nil
}
