// Package cloudauth logs in to the container registries of AWS (ECR), Azure (ACR) and Google
// Cloud (Artifact Registry, GCR) for ImageRepositories with spec.provider aws, azure or gcp, with
// the semantics of Flux's image-reflector-controller:
//
//   - Controller-level identity: the scan function's own environment (the AWS default credential
//     chain with IRSA and EKS Pod Identity; Azure workload identity, a client secret or managed
//     identity; Google application default credentials or the metadata server).
//   - Object-level identity: spec.serviceAccountName, allowed only with the feature gate
//     ObjectLevelWorkloadIdentity. A token for that ServiceAccount, issued by the apiserver's
//     TokenRequest for the cloud's audience, is exchanged at the cloud for the identity its
//     annotations name.
//   - A default ServiceAccount, when configured, stands in for a missing spec.serviceAccountName,
//     so that no object uses the controller's identity.
//
// Registry credentials are cached per provider, identity and registry until shortly before they
// expire. Nothing is read from the clouds before the first login.
package cloudauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
)

// ObjectLevelWorkloadIdentity is the name of the feature gate that lets an ImageRepository with a
// cloud provider log in as its spec.serviceAccountName.
const ObjectLevelWorkloadIdentity = "ObjectLevelWorkloadIdentity"

// Error is a login failure with the condition reason the ImageRepository reports for it:
// v1.UnsupportedProviderReason (the image is not in a registry of the provider),
// v1.FeatureGateDisabledReason (object-level identity without the gate) or
// v1.AuthenticationFailedReason (everything else).
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func failed(format string, args ...any) error {
	return &Error{Reason: v1.AuthenticationFailedReason, Err: fmt.Errorf(format, args...)}
}

// Authenticator logs in to cloud registries. It is safe for concurrent use; make one per
// process, so that its cache serves every scan.
type Authenticator struct {
	objectLevel    bool
	defaultAccount string
	client         *http.Client
	// customClient tells that the client was given: the AWS SDK then uses it rather than its
	// own, which honours AWS_CA_BUNDLE.
	customClient bool
	now          func() time.Time
	cache        *cache
	logins       singleflight.Group
}

// Option configures an Authenticator.
type Option func(*Authenticator)

// WithObjectLevelIdentity enables (or disables) the feature gate ObjectLevelWorkloadIdentity.
func WithObjectLevelIdentity(enabled bool) Option {
	return func(a *Authenticator) { a.objectLevel = enabled }
}

// WithDefaultServiceAccount names the ServiceAccount, in the object's namespace, that objects
// without spec.serviceAccountName log in as (Flux's --default-service-account).
func WithDefaultServiceAccount(name string) Option {
	return func(a *Authenticator) { a.defaultAccount = name }
}

// WithHTTPClient sets the client that talks to the clouds' token services and to the registries'
// token exchange; its transport decides proxies and trusted CAs.
func WithHTTPClient(c *http.Client) Option {
	return func(a *Authenticator) {
		if c != nil {
			a.client, a.customClient = c, true
		}
	}
}

// WithClock sets the clock that decides when cached credentials are renewed.
func WithClock(now func() time.Time) Option {
	return func(a *Authenticator) { a.now = now }
}

// WithCacheSize bounds the number of cached registry credentials.
func WithCacheSize(n int) Option {
	return func(a *Authenticator) {
		if n > 0 {
			a.cache.max = n
		}
	}
}

// New returns an Authenticator configured by opts.
func New(opts ...Option) *Authenticator {
	a := &Authenticator{now: time.Now, cache: newCache(DefaultCacheSize)}
	for _, o := range opts {
		o(a)
	}
	if a.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		a.client = &http.Client{Transport: t, Timeout: 30 * time.Second}
	}
	return a
}

// CheckRegistry returns the error Login gives when host is not a registry of provider, or when
// provider is not one of the clouds; nil otherwise.
func CheckRegistry(provider, host string) error {
	cl, ok := clouds[provider]
	if !ok {
		return &Error{Reason: v1.UnsupportedProviderReason, Err: fmt.Errorf(
			"spec.provider %q is not supported: use generic, aws, azure or gcp", provider)}
	}
	if _, err := cl.registry(host); err != nil {
		return &Error{Reason: v1.UnsupportedProviderReason, Err: err}
	}
	return nil
}

// OwnIdentity reports whether an object with spec.serviceAccountName serviceAccount logs in as
// the functions' own cloud identity: no ServiceAccount of its own and no default one.
func (a *Authenticator) OwnIdentity(serviceAccount string) bool {
	return serviceAccount == "" && a.defaultAccount == ""
}

// ParseFeatureGates reads a list of gates in the form of Flux's --feature-gates,
// "Name=true,Other=false", and reports whether ObjectLevelWorkloadIdentity is on. Unknown gates
// are an error, so that a misspelt gate is not silently off.
func ParseFeatureGates(s string) (objectLevel bool, err error) {
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			return false, fmt.Errorf("feature gate %q: want Name=true or Name=false", item)
		}
		var on bool
		switch strings.ToLower(strings.TrimSpace(value)) {
		case "true":
			on = true
		case "false":
		default:
			return false, fmt.Errorf("feature gate %q: the value must be true or false", item)
		}
		switch strings.TrimSpace(name) {
		case ObjectLevelWorkloadIdentity:
			objectLevel = on
		default:
			return false, fmt.Errorf("unknown feature gate %q (known: %s)", name, ObjectLevelWorkloadIdentity)
		}
	}
	return objectLevel, nil
}

// FromEnv returns an Authenticator configured as the functions' environment says:
// REFLECTOR_FEATURE_GATES (ObjectLevelWorkloadIdentity=true enables object-level identity) and
// REFLECTOR_DEFAULT_SERVICE_ACCOUNT. It reads no credentials.
func FromEnv() (*Authenticator, error) {
	objectLevel, err := ParseFeatureGates(os.Getenv("REFLECTOR_FEATURE_GATES"))
	if err != nil {
		return nil, fmt.Errorf("REFLECTOR_FEATURE_GATES: %w", err)
	}
	return New(WithObjectLevelIdentity(objectLevel),
		WithDefaultServiceAccount(strings.TrimSpace(os.Getenv("REFLECTOR_DEFAULT_SERVICE_ACCOUNT")))), nil
}

// Target is what a login is for: registry Host of an ImageRepository in Namespace with
// spec.provider Provider ("aws", "azure" or "gcp") and spec.serviceAccountName ServiceAccount
// (may be empty).
type Target struct {
	Provider, Namespace, ServiceAccount, Host string
}

// Login returns the credentials for t. kc reads the ServiceAccount and issues its tokens; it is
// used only for object-level identity. The error is an *Error.
func (a *Authenticator) Login(ctx context.Context, kc *kube.Client, t Target) (authn.AuthConfig, error) {
	provider, namespace, serviceAccount, host := t.Provider, t.Namespace, t.ServiceAccount, t.Host
	cl, ok := clouds[provider]
	if !ok {
		return authn.AuthConfig{}, &Error{Reason: v1.UnsupportedProviderReason, Err: fmt.Errorf(
			"spec.provider %q is not supported: use generic, aws, azure or gcp", provider)}
	}
	reg, err := cl.registry(host)
	if err != nil {
		return authn.AuthConfig{}, &Error{Reason: v1.UnsupportedProviderReason, Err: err}
	}
	id, err := a.identity(ctx, kc, cl, namespace, serviceAccount)
	if err != nil {
		return authn.AuthConfig{}, err
	}
	key := cacheKey{provider: provider, identity: id.key(), registry: host}
	now := a.now()
	if cred, ok := a.cache.get(key, now); ok {
		return cred, nil
	}
	// Scans that miss the cache together share one login: a burst of pushes to one registry
	// costs the cloud one token exchange. The login outlives a caller that gives up, bounded by
	// loginTimeout, so that the others still get its answer.
	ch := a.logins.DoChan(fmt.Sprintf("%q", key), func() (any, error) {
		// A login that ended between the lookup above and this flight has filled the cache.
		if cred, ok := a.cache.get(key, now); ok {
			return cred, nil
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loginTimeout)
		defer cancel()
		cred, expires, err := cl.login(lctx, a, id, reg)
		if err != nil {
			return nil, err
		}
		a.cache.put(key, cred, now, expires)
		return cred, nil
	})
	select {
	case <-ctx.Done():
		return authn.AuthConfig{}, failed("logging in to %s as %s: %v", host, id.describe(), context.Cause(ctx))
	case res := <-ch:
		if res.Err != nil {
			return authn.AuthConfig{}, res.Err
		}
		return res.Val.(authn.AuthConfig), nil
	}
}

// loginTimeout bounds one login to a cloud, token exchanges included.
const loginTimeout = 30 * time.Second

// cloud is what each provider implements.
type cloud struct {
	// name is how messages call the cloud.
	name string
	// annotations are the ServiceAccount annotations that select the cloud identity.
	annotations []string
	// registry checks that host is one of the cloud's registries and describes it.
	registry func(host string) (registry, error)
	// login returns the registry's credentials and when they expire.
	login func(ctx context.Context, a *Authenticator, id *identity, reg registry) (authn.AuthConfig, time.Time, error)
}

// registry is a registry host as a cloud understands it.
type registry struct {
	host string
	// region is the AWS region (ECR), or the Azure cloud's name (ACR).
	region string
	// public marks ECR Public.
	public bool
}

var clouds = map[string]*cloud{
	v1.AWSProvider:   awsCloud,
	v1.AzureProvider: azureCloud,
	v1.GCPProvider:   gcpCloud,
}

// identity is who logs in: the controller (account nil) or a ServiceAccount.
type identity struct {
	kube    *kube.Client
	account *corev1.ServiceAccount
	// defaulted tells that the account is the default ServiceAccount, not the object's own.
	defaulted bool
	cloud     *cloud
}

// key identifies the identity in the cache: the annotations that select the cloud identity are
// part of it, so that changing them takes effect at the next scan.
func (id *identity) key() string {
	if id.account == nil {
		return "controller"
	}
	var b strings.Builder
	b.WriteString(id.account.Namespace + "/" + id.account.Name + "/" + string(id.account.UID))
	for _, k := range id.cloud.annotations {
		b.WriteString("\x00" + id.account.Annotations[k])
	}
	return b.String()
}

// describe names the identity in messages.
func (id *identity) describe() string {
	if id.account == nil {
		return "the scan function's own identity"
	}
	return "serviceaccount " + id.account.Namespace + "/" + id.account.Name
}

// annotation returns a required annotation of the ServiceAccount, or an error that says to set it.
func (id *identity) annotation(name, what string) (string, error) {
	v := strings.TrimSpace(id.account.Annotations[name])
	if v == "" {
		return "", failed("%s has no annotation %s: set it to %s", id.describe(), name, what)
	}
	return v, nil
}

// token returns a token for the ServiceAccount from the apiserver's TokenRequest.
func (id *identity) token(ctx context.Context, audience string) (string, error) {
	expiry := int64(time.Hour / time.Second)
	tr, err := id.kube.ServiceAccounts.CreateToken(ctx, id.account.Namespace, id.account.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: &expiry,
		}})
	if err != nil {
		hint := ""
		if apierrors.IsForbidden(err) {
			hint = " (the function's ServiceAccount needs create on serviceaccounts/token, which knative/'s object-level-identity component grants)"
		}
		return "", failed("requesting a token for %s with audience %s: %v%s", id.describe(), audience, apiReason(err), hint)
	}
	return tr.Status.Token, nil
}

// identity decides who logs in for an object: its ServiceAccount, the default one, or the
// controller.
func (a *Authenticator) identity(ctx context.Context, kc *kube.Client, cl *cloud, namespace, name string) (*identity, error) {
	id := &identity{kube: kc, cloud: cl}
	if name == "" && a.defaultAccount != "" {
		name, id.defaulted = a.defaultAccount, true
	}
	if name == "" {
		return id, nil
	}
	if !a.objectLevel {
		if id.defaulted {
			return nil, &Error{Reason: v1.FeatureGateDisabledReason, Err: fmt.Errorf(
				"the default serviceaccount %q stands in for spec.serviceAccountName, but object-level workload identity is disabled: enable the feature gate %s (REFLECTOR_FEATURE_GATES=%s=true) or unset REFLECTOR_DEFAULT_SERVICE_ACCOUNT",
				name, ObjectLevelWorkloadIdentity, ObjectLevelWorkloadIdentity)}
		}
		return nil, &Error{Reason: v1.FeatureGateDisabledReason, Err: fmt.Errorf(
			"spec.serviceAccountName %q with provider %s needs object-level workload identity, which is disabled: enable the feature gate %s (REFLECTOR_FEATURE_GATES=%s=true) or remove spec.serviceAccountName to use the scan function's own identity",
			name, cl.name, ObjectLevelWorkloadIdentity, ObjectLevelWorkloadIdentity)}
	}
	if kc == nil {
		return nil, failed("serviceaccount %s/%s cannot be read: no Kubernetes client", namespace, name)
	}
	sa, err := kc.ServiceAccounts.Get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		field := "spec.serviceAccountName"
		if id.defaulted {
			field = "the default serviceaccount"
		}
		return nil, failed("%s: serviceaccount %s/%s not found", field, namespace, name)
	}
	if err != nil {
		return nil, failed("reading serviceaccount %s/%s: %v", namespace, name, apiReason(err))
	}
	id.account = sa
	return id, nil
}

// apiReason shortens an apiserver error to its message.
func apiReason(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}
