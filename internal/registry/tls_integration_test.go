package registry_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestIntegrationCertificates reaches HTTPS registries whose certificates come from a private CA,
// one of them requiring a client certificate, with certSecretRef read from a real apiserver.
// The registries go by a name that is not 127.0.0.1, so go-containerregistry cannot fall back to
// plain HTTP.
func TestIntegrationCertificates(t *testing.T) {
	server := testenv.NewRegistry(t, testenv.RegistryTLS(), testenv.RegistryAlias("registry.test"))
	server.Push(t, "app", "v1")
	mutual := testenv.NewRegistry(t, testenv.RegistryClientCerts(), testenv.RegistryAlias("registry.test"),
		testenv.RegistryBasicAuth("robot", "s3cret"))
	mutual.Push(t, "app", "v1")
	kc, ns := apiserver(t)

	createSecret(t, kc, ns+"/server-ca", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": server.CAPEM()})
	createSecret(t, kc, ns+"/mutual-ca-only", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": mutual.CAPEM()})
	createSecret(t, kc, ns+"/mutual-tls", corev1.SecretTypeTLS, map[string][]byte{
		"ca.crt": mutual.CAPEM(), "tls.crt": mutual.ClientCertPEM(), "tls.key": mutual.ClientKeyPEM()})
	createSecret(t, kc, ns+"/not-pem", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": []byte("hello")})
	createSecret(t, kc, ns+"/cert-without-key", corev1.SecretTypeOpaque, map[string][]byte{"tls.crt": mutual.ClientCertPEM()})
	// One Secret as both secretRef and certSecretRef.
	both := dockerConfig(mutual.HostAs("registry.test"), "robot", "s3cret")
	both["ca.crt"], both["tls.crt"], both["tls.key"] = mutual.CAPEM(), mutual.ClientCertPEM(), mutual.ClientKeyPEM()
	createSecret(t, kc, ns+"/everything", corev1.SecretTypeDockerConfigJson, both)

	certs := func(name string) func(*v1.ImageRepository) {
		return func(o *v1.ImageRepository) { o.Spec.CertSecretRef = &v1.LocalObjectReference{Name: name} }
	}
	tests := []struct {
		name   string
		reg    *testenv.Registry
		edit   func(*v1.ImageRepository)
		reason string
		says   []string
	}{
		{"private CA", server, certs("server-ca"), "", nil},
		{"private CA not given", server, func(*v1.ImageRepository) {}, v1.ReadOperationFailedReason, []string{"certificate signed by unknown authority"}},
		{"client certificate", mutual, func(o *v1.ImageRepository) {
			certs("mutual-tls")(o)
			o.Spec.SecretRef = &v1.LocalObjectReference{Name: "everything"}
		}, "", nil},
		{"one Secret as secretRef and certSecretRef", mutual, func(o *v1.ImageRepository) {
			certs("everything")(o)
			o.Spec.SecretRef = &v1.LocalObjectReference{Name: "everything"}
		}, "", nil},
		{"client certificate not given", mutual, certs("mutual-ca-only"), v1.ReadOperationFailedReason, []string{"certificate required"}},
		{"ca.crt that is not PEM", server, certs("not-pem"), v1.AuthenticationFailedReason, []string{"ca.crt holds no PEM-encoded certificate"}},
		{"tls.crt without tls.key", mutual, certs("cert-without-key"), v1.AuthenticationFailedReason, []string{"tls.crt and tls.key must be given together"}},
		{"missing secret", server, certs("gone"), v1.AuthenticationFailedReason, []string{"spec.certSecretRef: secret " + ns + "/gone not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fast(reaching(tt.reg, "registry.test")...)
			res, err := scan(t, c, kc, imageRepository(ns, tt.reg.HostAs("registry.test")+"/app", tt.edit))
			if tt.reason != "" {
				wantError(t, err, tt.reason, tt.says...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tags, []string{"v1"}) {
				t.Errorf("tags = %q, want [v1]", res.Tags)
			}
		})
	}
}

// TestIntegrationProxy reaches an HTTPS registry through an authenticating forward proxy named
// by proxySecretRef.
func TestIntegrationProxy(t *testing.T) {
	reg := testenv.NewRegistry(t, testenv.RegistryTLS())
	reg.Push(t, "app", "v1")
	proxy := testenv.NewRegistryProxy(t, "proxy-user", "proxy-pass")
	kc, ns := apiserver(t)
	createSecret(t, kc, ns+"/ca", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": reg.CAPEM()})
	createSecret(t, kc, ns+"/proxy", corev1.SecretTypeOpaque, map[string][]byte{
		"address": []byte(proxy.URL()), "username": []byte("proxy-user"), "password": []byte("proxy-pass")})
	createSecret(t, kc, ns+"/proxy-wrong", corev1.SecretTypeOpaque, map[string][]byte{
		"address": []byte(proxy.URL()), "username": []byte("proxy-user"), "password": []byte("guess")})
	createSecret(t, kc, ns+"/proxy-no-address", corev1.SecretTypeOpaque, map[string][]byte{"username": []byte("proxy-user")})
	through := func(name string) func(*v1.ImageRepository) {
		return func(o *v1.ImageRepository) {
			o.Spec.CertSecretRef = &v1.LocalObjectReference{Name: "ca"}
			o.Spec.ProxySecretRef = &v1.LocalObjectReference{Name: name}
		}
	}

	res, err := scan(t, fast(), kc, imageRepository(ns, reg.Image("app"), through("proxy")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tags, []string{"v1"}) {
		t.Errorf("tags = %q, want [v1]", res.Tags)
	}
	if served := proxy.Served(); !slices.Contains(served, "CONNECT "+reg.Host()) {
		t.Errorf("the proxy served %q, want a CONNECT to %s", served, reg.Host())
	}
	if proxy.Refused() != 0 {
		t.Errorf("the proxy refused %d requests, want none", proxy.Refused())
	}

	_, err = scan(t, fast(), kc, imageRepository(ns, reg.Image("app"), through("proxy-wrong")))
	wantError(t, err, v1.AuthenticationFailedReason, "Proxy Authentication Required")
	if proxy.Refused() == 0 {
		t.Error("the proxy refused nothing, want the wrong password refused")
	}

	_, err = scan(t, fast(), kc, imageRepository(ns, reg.Image("app"), through("proxy-no-address")))
	wantError(t, err, v1.AuthenticationFailedReason, "spec.proxySecretRef: secret "+ns+"/proxy-no-address has no address")

	// An address that is refused must not carry its credentials into the message.
	createSecret(t, kc, ns+"/proxy-socks", corev1.SecretTypeOpaque, map[string][]byte{
		"address": []byte("socks5://user:planted-socks-password@127.0.0.1:1080")})
	_, err = scan(t, fast(), kc, imageRepository(ns, reg.Image("app"), through("proxy-socks")))
	wantError(t, err, v1.AuthenticationFailedReason, `address "socks5://xxxxx@127.0.0.1:1080" is not an http:// or https:// URL`)
	if strings.Contains(err.Error(), "planted-socks-password") {
		t.Errorf("the error shows the proxy's password: %v", err)
	}
}
