package registry

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/redact"
)

// secrets reads the Secrets and the ServiceAccount an ImageRepository refers to, from the
// object's own namespace, each Secret once per scan: one Secret may serve as both secretRef
// and certSecretRef.
type secrets struct {
	kube      *kube.Client
	namespace string
	read      map[string]*corev1.Secret
}

// authFailed is the error of credentials that cannot be read or used.
func authFailed(format string, args ...any) error {
	return &Error{Reason: v1.AuthenticationFailedReason, Err: fmt.Errorf(format, args...)}
}

// secret returns the named Secret; field names the spec field that refers to it.
func (s *secrets) secret(ctx context.Context, name, field string) (*corev1.Secret, error) {
	if sec, ok := s.read[name]; ok {
		return sec, nil
	}
	if s.kube == nil {
		return nil, authFailed("%s: secret %s/%s cannot be read: no Kubernetes client", field, s.namespace, name)
	}
	sec, err := s.kube.Secrets.Get(ctx, s.namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, authFailed("%s: secret %s/%s not found", field, s.namespace, name)
	}
	if err != nil {
		return nil, authFailed("%s: reading secret %s/%s: %w", field, s.namespace, name, err)
	}
	if s.read == nil {
		s.read = map[string]*corev1.Secret{}
	}
	s.read[name] = sec
	return sec, nil
}

// authenticator returns the credentials for host: the matching entry of spec.secretRef, else
// of the first image pull secret of spec.serviceAccountName that has one, else anonymous. A
// secretRef without an entry for host is an error, since it was named for this registry.
func (s *secrets) authenticator(ctx context.Context, obj *v1.ImageRepository, host string) (authn.Authenticator, error) {
	if ref := obj.Spec.SecretRef; ref != nil {
		sec, err := s.secret(ctx, ref.Name, "spec.secretRef")
		if err != nil {
			return nil, err
		}
		auth, found, err := dockerConfigAuth(sec, host)
		if err != nil {
			return nil, authFailed("spec.secretRef: secret %s/%s: %w", s.namespace, ref.Name, err)
		}
		if !found {
			return nil, authFailed("spec.secretRef: secret %s/%s has no credentials for registry %s", s.namespace, ref.Name, host)
		}
		return auth, nil
	}
	if sa := obj.Spec.ServiceAccountName; sa != "" {
		if s.kube == nil {
			return nil, authFailed("spec.serviceAccountName: serviceaccount %s/%s cannot be read: no Kubernetes client", s.namespace, sa)
		}
		account, err := s.kube.ServiceAccounts.Get(ctx, s.namespace, sa)
		if apierrors.IsNotFound(err) {
			return nil, authFailed("spec.serviceAccountName: serviceaccount %s/%s not found", s.namespace, sa)
		}
		if err != nil {
			return nil, authFailed("spec.serviceAccountName: reading serviceaccount %s/%s: %w", s.namespace, sa, err)
		}
		for _, ref := range account.ImagePullSecrets {
			field := fmt.Sprintf("imagePullSecrets of serviceaccount %s", sa)
			sec, err := s.secret(ctx, ref.Name, field)
			if err != nil {
				return nil, err
			}
			auth, found, err := dockerConfigAuth(sec, host)
			if err != nil {
				return nil, authFailed("%s: secret %s/%s: %w", field, s.namespace, ref.Name, err)
			}
			if found {
				return auth, nil
			}
		}
	}
	return authn.Anonymous, nil
}

// dockerAuth is one registry's entry of a Docker config file.
type dockerAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// dockerConfigAuth finds host's credentials in a kubernetes.io/dockerconfigjson Secret, or a
// legacy kubernetes.io/dockercfg one.
func dockerConfigAuth(sec *corev1.Secret, host string) (authn.Authenticator, bool, error) {
	var auths map[string]dockerAuth
	if b, ok := sec.Data[corev1.DockerConfigJsonKey]; ok {
		var cfg struct {
			Auths map[string]dockerAuth `json:"auths"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, false, fmt.Errorf("%s is not a valid Docker config: %s", corev1.DockerConfigJsonKey, jsonProblem(err))
		}
		auths = cfg.Auths
	} else if b, ok := sec.Data[corev1.DockerConfigKey]; ok {
		if err := json.Unmarshal(b, &auths); err != nil {
			return nil, false, fmt.Errorf("%s is not a valid Docker config: %s", corev1.DockerConfigKey, jsonProblem(err))
		}
	} else {
		return nil, false, fmt.Errorf("no %s key (a secret of type %s is expected)", corev1.DockerConfigJsonKey, corev1.SecretTypeDockerConfigJson)
	}
	// An entry for exactly this host wins over a Docker Hub alias; sorting makes the choice
	// between aliases stable.
	keys := slices.Sorted(maps.Keys(auths))
	exact := func(key string) int {
		if strings.EqualFold(configHost(key), host) {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(keys, func(a, b string) int { return cmp.Compare(exact(a), exact(b)) })
	for _, key := range keys {
		entry := auths[key]
		if !sameRegistry(configHost(key), host) {
			continue
		}
		cfg := authn.AuthConfig{
			Username:      entry.Username,
			Password:      entry.Password,
			IdentityToken: entry.IdentityToken,
			RegistryToken: entry.RegistryToken,
		}
		if entry.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(entry.Auth)
			if err != nil {
				return nil, false, fmt.Errorf("the auth field for %s is not base64: %w", redact.Address(key), err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, false, fmt.Errorf("the auth field for %s is not base64 of username:password", redact.Address(key))
			}
			cfg.Username, cfg.Password = user, pass
		}
		if cfg == (authn.AuthConfig{}) {
			return nil, false, fmt.Errorf("the entry for %s has no credentials", redact.Address(key))
		}
		return authn.FromConfig(cfg), true, nil
	}
	return nil, false, nil
}

// jsonProblem describes why a Docker config does not decode without quoting it: a syntax
// error's message shows the offending character, which may belong to a password.
func jsonProblem(err error) string {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("JSON syntax error at byte %d", se.Offset)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		return fmt.Sprintf("%s is a JSON %s, not a %s", te.Field, te.Value, te.Type)
	}
	return "not a JSON object of the expected shape"
}

// configHost reduces a Docker config key, which may be a URL such as
// https://index.docker.io/v1/, to its host.
func configHost(key string) string {
	if _, rest, ok := strings.Cut(key, "://"); ok {
		key = rest
	}
	host, _, _ := strings.Cut(key, "/")
	return host
}

// sameRegistry compares two registry hosts as imagename does: case-insensitively, with every
// Docker Hub alias equal.
func sameRegistry(a, b string) bool {
	return imagename.Key(a, "x") == imagename.Key(b, "x")
}

// tlsConfig builds the TLS settings of spec.certSecretRef: ca.crt added to the system roots,
// tls.crt and tls.key presented as the client certificate. Flux's deprecated key names caFile,
// certFile and keyFile are read too. addsCA tells whether the Secret adds a CA.
func (s *secrets) tlsConfig(ctx context.Context, name string, base *tls.Config) (_ *tls.Config, addsCA bool, _ error) {
	sec, err := s.secret(ctx, name, "spec.certSecretRef")
	if err != nil {
		return nil, false, err
	}
	where := fmt.Sprintf("spec.certSecretRef: secret %s/%s", s.namespace, name)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	ca := firstKey(sec, "ca.crt", "caFile")
	cert, key := firstKey(sec, corev1.TLSCertKey, "certFile"), firstKey(sec, corev1.TLSPrivateKeyKey, "keyFile")
	if ca == nil && cert == nil && key == nil {
		return nil, false, authFailed("%s has none of the keys ca.crt, tls.crt and tls.key", where)
	}
	if ca != nil {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(ca) {
			return nil, false, authFailed("%s: ca.crt holds no PEM-encoded certificate", where)
		}
		cfg.RootCAs = pool
	}
	if (cert == nil) != (key == nil) {
		return nil, false, authFailed("%s: tls.crt and tls.key must be given together", where)
	}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, false, authFailed("%s: tls.crt and tls.key: %w", where, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, ca != nil, nil
}

// proxyURL reads spec.proxySecretRef: address, with username and password as its credentials.
func (s *secrets) proxyURL(ctx context.Context, name string) (*url.URL, error) {
	sec, err := s.secret(ctx, name, "spec.proxySecretRef")
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("spec.proxySecretRef: secret %s/%s", s.namespace, name)
	address := strings.TrimSpace(string(sec.Data["address"]))
	if address == "" {
		return nil, authFailed("%s has no address", where)
	}
	u, err := url.Parse(address)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		// The address may carry the proxy's credentials, and url.Parse's error quotes it whole.
		return nil, authFailed("%s: address %q is not an http:// or https:// URL", where, redact.Address(address))
	}
	user, pass := string(sec.Data["username"]), string(sec.Data["password"])
	if user != "" || pass != "" {
		u.User = url.UserPassword(user, pass)
	}
	return u, nil
}

// firstKey returns the value of the first of keys that sec holds.
func firstKey(sec *corev1.Secret, keys ...string) []byte {
	for _, k := range keys {
		if v, ok := sec.Data[k]; ok {
			return v
		}
	}
	return nil
}
