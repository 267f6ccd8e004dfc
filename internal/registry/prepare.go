package registry

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/cloudauth"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/kube"
)

// Scan is one authenticated session with the registry of an ImageRepository: ListTags and Head
// share its transport, so the registry is pinged and a bearer token fetched once, and all of
// them finish within the object's timeout, counted from Prepare.
type Scan struct {
	c        *Client
	repo     name.Repository
	client   *http.Client
	rt       http.RoundTripper
	timeout  time.Duration
	deadline time.Time
	exclude  []*regexp.Regexp
	owned    *http.Transport
	// session is the key of the reused session the scan runs in, if any.
	session *[sha256.Size]byte
}

// Prepare checks obj's spec, reads the Secrets and ServiceAccount it refers to from its
// namespace through kc (which may be nil when it refers to none), logs in to the cloud of a
// provider other than generic, and pings the registry with the resulting credentials, TLS and
// proxy settings, unless a recent scan of the same repository with the same credentials left
// a session to reuse (see DefaultSessionTTL). The error is an *Error: an invalid image, a provider that does not serve the
// image's registry, or object-level identity without its feature gate is Stalled; unreadable or
// refused credentials are AuthenticationFailed. Close the Scan when done with it.
func (c *Client) Prepare(ctx context.Context, kc *kube.Client, obj *v1.ImageRepository) (*Scan, error) {
	s := &Scan{c: c, timeout: obj.GetTimeout()}
	s.deadline = time.Now().Add(s.timeout)
	ctx, cancel := context.WithDeadline(ctx, s.deadline)
	defer cancel()

	repo, err := imagename.Parse(obj.Spec.Image, obj.Spec.Insecure)
	if err != nil {
		return nil, &Error{Reason: v1.ImageURLInvalidReason, Err: err}
	}
	s.repo = repo
	for i, expr := range obj.GetExclusionList() {
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, &Error{Reason: v1.ReadOperationFailedReason, Err: fmt.Errorf(
				"spec.exclusionList[%d] %q is not a valid regular expression: %w", i, expr, err)}
		}
		s.exclude = append(s.exclude, re)
	}

	sec := &secrets{kube: kc, namespace: obj.Namespace}
	base := c.base
	// chosen names what of the transport the object chooses itself, if anything: its proxy, its
	// CA, plain HTTP.
	var chosen []string
	if obj.Spec.Insecure {
		chosen = append(chosen, "spec.insecure")
	}
	if obj.Spec.CertSecretRef != nil || obj.Spec.ProxySecretRef != nil {
		base = base.Clone()
		if ref := obj.Spec.CertSecretRef; ref != nil {
			var ca bool
			if base.TLSClientConfig, ca, err = sec.tlsConfig(ctx, ref.Name, base.TLSClientConfig); err != nil {
				return nil, err
			}
			if ca {
				chosen = append(chosen, "the CA of spec.certSecretRef")
			}
		}
		if ref := obj.Spec.ProxySecretRef; ref != nil {
			u, err := sec.proxyURL(ctx, ref.Name)
			if err != nil {
				return nil, err
			}
			base.Proxy = http.ProxyURL(u)
			chosen = append(chosen, "spec.proxySecretRef")
		}
		s.owned = base
	}
	auth, err := c.authenticator(ctx, sec, obj, repo.RegistryStr(), chosen)
	if err != nil {
		s.Close()
		return nil, err
	}

	// A scan with its own TLS or proxy settings opens its own session; others reuse one.
	var key [sha256.Size]byte
	reuse := s.owned == nil
	if reuse {
		if key, err = sessionKey(ctx, repo, auth); err != nil {
			reuse = false // the ping below reports the credentials' failure
		}
	}
	if reuse {
		if rt, ok := c.sessions.get(key, time.Now()); ok {
			s.rt, s.session = rt, &key
			s.client = &http.Client{Transport: s.rt}
			return s, nil
		}
	}
	polite := transport.NewUserAgent(&politeTransport{inner: c.guard.RoundTripper(base), c: c, host: repo.RegistryStr()}, userAgent)
	s.rt, err = transport.NewWithContext(ctx, repo.Registry, auth, polite, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		s.Close()
		return nil, s.fail(ctx, "connecting to registry "+repo.RegistryStr(), err)
	}
	if reuse {
		c.sessions.put(key, s.rt, time.Now())
		s.session = &key
	}
	s.client = &http.Client{Transport: s.rt}
	return s, nil
}

// Repository returns the repository the scan reads.
func (s *Scan) Repository() name.Repository { return s.repo }

// Close releases the connections of a scan that needed its own TLS or proxy settings.
func (s *Scan) Close() {
	if s.owned != nil {
		s.owned.CloseIdleConnections()
	}
}

// Excluded reports whether tag matches the exclusion list, so that a tag named by a push event
// is kept or dropped exactly as a listing would.
func (s *Scan) Excluded(tag string) bool {
	for _, re := range s.exclude {
		if re.MatchString(tag) {
			return true
		}
	}
	return false
}

// fail describes and classifies the failure of the operation what, saying so when the scan's
// timeout, rather than the caller, ended it.
func (s *Scan) fail(ctx context.Context, what string, err error) error {
	if s.session != nil {
		s.c.sessions.drop(*s.session, err)
	}
	if _, waited := errors.AsType[*RetryAfterError](err); !waited && timedOut(ctx, err) && !time.Now().Before(s.deadline) {
		return classify(fmt.Errorf("%s: timed out after %s (the ImageRepository's timeout): %w", what, s.timeout, err))
	}
	return classify(fmt.Errorf("%s: %w", what, err))
}

// authenticator returns the credentials of a scan: spec.secretRef's when set, else those of the
// provider's cloud, else (generic) those of spec.serviceAccountName's image pull secrets. The
// functions' own cloud identity never travels through a transport that the object chose
// (chosen names what it chose): a proxy of its own would see the credentials, a CA of its own
// would let anyone it trusts intercept them, plain HTTP would show them to the network. Such an
// object is Stalled with TransportNotTrusted before any login, so no token is even fetched.
func (c *Client) authenticator(ctx context.Context, sec *secrets, obj *v1.ImageRepository, host string, chosen []string) (authn.Authenticator, error) {
	provider := obj.GetProvider()
	if provider == v1.GenericProvider || obj.Spec.SecretRef != nil {
		return sec.authenticator(ctx, obj, host)
	}
	if err := cloudauth.CheckRegistry(provider, host); err != nil {
		return nil, &Error{Reason: v1.UnsupportedProviderReason, Err: err}
	}
	if len(chosen) > 0 && c.cloud.OwnIdentity(obj.Spec.ServiceAccountName) {
		return nil, &Error{Reason: v1.TransportNotTrustedReason, Err: fmt.Errorf(
			"spec.provider %s logs in with reflector's own cloud identity, which is never sent through a transport the object chooses (%s): give the object spec.serviceAccountName (object-level workload identity) or a spec.secretRef, or remove %s",
			provider, strings.Join(chosen, ", "), strings.Join(chosen, " and "))}
	}
	cred, err := c.cloud.Login(ctx, sec.kube, cloudauth.Target{
		Provider: provider, Namespace: obj.Namespace, ServiceAccount: obj.Spec.ServiceAccountName, Host: host})
	if err != nil {
		if ce, ok := errors.AsType[*cloudauth.Error](err); ok {
			return nil, &Error{Reason: ce.Reason, Err: err}
		}
		return nil, &Error{Reason: v1.AuthenticationFailedReason, Err: err}
	}
	return authn.FromConfig(cred), nil
}
