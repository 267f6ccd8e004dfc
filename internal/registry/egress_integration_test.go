package registry_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

// internalSecret is what the servers that stand for a cluster's private network answer: it must
// never reach an error.
const internalSecret = "db_password=hunter2"

// internalServer is an HTTP server on 127.0.0.2, an address the tests' guard refuses, that
// counts the connections it accepts.
type internalServer struct {
	url, host string
	accepted  *atomic.Int32
}

func newInternalServer(t *testing.T) *internalServer {
	t.Helper()
	host, accepted := testenv.ServeCounted(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, internalSecret)
	}))
	return &internalServer{url: "http://" + host, host: host, accepted: accepted}
}

// wantRefused checks that err is the guard's refusal and tells nothing of what was refused.
func wantRefused(t *testing.T, err error, internal *internalServer, names ...string) {
	t.Helper()
	wantError(t, err, v1.AddressNotAllowedReason, egress.EnvAllow)
	if registry.Stalled(err) {
		t.Error("a refused address is Stalled; the allow-list or the name's address may change")
	}
	for _, s := range append([]string{internal.host, "127.0.0.2", internalSecret}, names...) {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the error names %q: %v", s, err)
		}
	}
	if n := internal.accepted.Load(); n != 0 {
		t.Errorf("%d connections reached the internal address", n)
	}
}

func TestIntegrationEgressRefusesInternalAddresses(t *testing.T) {
	internal := newInternalServer(t)
	_, internalPort, _ := net.SplitHostPort(internal.host)
	dns := testenv.NewDNS(t, map[string][]netip.Addr{
		"registry.example.test": {netip.MustParseAddr("127.0.0.2")},
	})
	c := fast(registry.WithEgress(egress.Allow(testenv.LoopbackAllowed).WithResolver(dns.Resolver())))

	// A registry on an allowed address whose answers lead to the internal one.
	tenant := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/" && r.URL.Query().Get("token") == "":
			w.WriteHeader(http.StatusOK)
		case strings.HasPrefix(r.URL.Path, "/token-elsewhere/"):
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="registry"`, internal.url))
			w.WriteHeader(http.StatusUnauthorized)
		default:
			http.Redirect(w, r, internal.url+"/secret", http.StatusFound)
		}
	}))
	defer tenant.Close()
	tenantHost := strings.TrimPrefix(tenant.URL, "http://")
	// A registry whose ping names a token endpoint at the internal address.
	realm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="registry"`, internal.url))
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer realm.Close()

	for _, tt := range []struct {
		name, image string
		insecure    bool
	}{
		{"a redirect of the listing", tenantHost + "/app", false},
		{"spec.image at the address", internal.host + "/app", true},
		{"a token endpoint at the address", strings.TrimPrefix(realm.URL, "http://") + "/app", false},
		{"a name that resolves to the address", "registry.example.test:" + internalPort + "/app", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scan(t, c, nil, imageRepository("default", tt.image, func(o *v1.ImageRepository) { o.Spec.Insecure = tt.insecure }))
			wantRefused(t, err, internal)
		})
	}
	if dns.Queries() == 0 {
		t.Error("the name was never resolved by the test's resolver")
	}
	// A digest lookup takes the same path.
	s, err := c.Prepare(context.Background(), nil, imageRepository("default", tenantHost+"/app"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Head(context.Background(), "v1")
	wantRefused(t, err, internal)
}

// TestIntegrationRedirectHostsDoNotGrowState follows a listing whose every page the registry
// redirects to a host name of its own: the rate limiters and the metric series stay those of
// the object's registry host.
func TestIntegrationRedirectHostsDoNotGrowState(t *testing.T) {
	const pages = 1000
	dns := testenv.NewDNS(t, nil)
	var reg *httptest.Server
	reg = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, port, _ := net.SplitHostPort(reg.Listener.Addr().String())
		switch {
		case r.URL.Path == "/v2/":
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/v2/app/tags/list":
			page := 0
			fmt.Sscan(r.URL.Query().Get("page"), &page)
			http.Redirect(w, r, fmt.Sprintf("http://h%d.redirect.test:%s/page?i=%d", page, port, page), http.StatusFound)
		case r.URL.Path == "/page":
			i := 0
			fmt.Sscan(r.URL.Query().Get("i"), &i)
			if i+1 < pages {
				w.Header().Set("Link", fmt.Sprintf(`</v2/app/tags/list?n=1000&page=%d>; rel="next"`, i+1))
			}
			fmt.Fprintf(w, `{"name":"app","tags":["t%d"]}`, i)
		default:
			http.NotFound(w, r)
		}
	}))
	defer reg.Close()
	for i := range pages {
		dns.Set(fmt.Sprintf("h%d.redirect.test", i), netip.MustParseAddr("127.0.0.1"))
	}
	c := fast(registry.WithEgress(egress.Allow(testenv.LoopbackAllowed).WithResolver(dns.Resolver())))
	host := reg.Listener.Addr().String()
	res, err := scan(t, c, nil, imageRepository("default", host+"/app"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tags) != pages {
		t.Fatalf("%d tags, want %d", len(res.Tags), pages)
	}
	if dns.Queries() < pages {
		t.Errorf("%d lookups for %d redirect hosts", dns.Queries(), pages)
	}
	if n := c.Limiters(); n != 1 {
		t.Errorf("%d rate limiters after one repository's scan, want 1", n)
	}
	hosts := registryRequestHosts(t)
	if hosts[host] < 2*pages {
		t.Errorf("%v requests counted for %s, want at least %d", hosts[host], host, 2*pages)
	}
	for h := range hosts {
		if strings.Contains(h, "redirect.test") {
			t.Errorf("a metric series for the redirect host %s", h)
		}
	}
}

// registryRequestHosts sums reflector_registry_requests_total by host.
func registryRequestHosts(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "reflector_registry_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[label(m, "host")] += m.GetCounter().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestIntegrationOwnCloudIdentityStaysOnTrustedTransports gives objects that log in with the
// functions' own cloud identity a transport of their own: a proxy, a CA, plain HTTP. None is
// scanned, no login happens, and nothing reaches the proxy.
func TestIntegrationOwnCloudIdentityStaysOnTrustedTransports(t *testing.T) {
	f := newCloudFixture(t)
	c, _ := f.client()
	var proxied atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		w.Header().Set("Proxy-Authenticate", `Basic realm="tenant"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
	}))
	defer proxy.Close()
	createSecret(t, f.kube, f.ns+"/tenant-proxy", corev1.SecretTypeOpaque, map[string][]byte{"address": []byte(proxy.URL)})
	createSecret(t, f.kube, f.ns+"/tenant-ca", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": testenv.NewRegistry(t, testenv.RegistryTLS()).CAPEM()})

	proxyRef := func(o *v1.ImageRepository) { o.Spec.ProxySecretRef = &v1.LocalObjectReference{Name: "tenant-proxy"} }
	caRef := func(o *v1.ImageRepository) { o.Spec.CertSecretRef = &v1.LocalObjectReference{Name: "tenant-ca"} }
	insecure := func(o *v1.ImageRepository) { o.Spec.Insecure = true }
	for _, provider := range []struct{ name, host string }{
		{v1.AWSProvider, testenv.ECRHost}, {v1.GCPProvider, testenv.GARHost}, {v1.AzureProvider, testenv.ACRHost},
	} {
		for _, tt := range []struct {
			name string
			edit func(*v1.ImageRepository)
			says string
		}{
			{"proxy", proxyRef, "spec.proxySecretRef"},
			{"CA", caRef, "the CA of spec.certSecretRef"},
			{"insecure", insecure, "spec.insecure"},
		} {
			t.Run(provider.name+" "+tt.name, func(t *testing.T) {
				before := len(f.clouds.Calls())
				obj := cloudRepository(f.ns, provider.name, provider.host, "")
				tt.edit(obj)
				_, err := scan(t, c, f.kube, obj)
				wantError(t, err, v1.TransportNotTrustedReason, tt.says, "spec.serviceAccountName")
				if !registry.Stalled(err) {
					t.Error("not Stalled: only a spec change can fix it")
				}
				if calls := f.clouds.Calls()[before:]; len(calls) > 0 {
					t.Errorf("cloud calls %v: the login happened", calls)
				}
			})
		}
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("%d requests reached the tenant's proxy", n)
	}
	// A client certificate alone changes no trust: it is not refused for that.
	createSecret(t, f.kube, f.ns+"/client-cert", corev1.SecretTypeOpaque, map[string][]byte{
		"tls.crt": testenv.NewRegistry(t, testenv.RegistryClientCerts()).ClientCertPEM(),
	})
	obj := cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, "")
	obj.Spec.CertSecretRef = &v1.LocalObjectReference{Name: "client-cert"}
	_, err := scan(t, c, f.kube, obj)
	if registry.Reason(err) == v1.TransportNotTrustedReason {
		t.Errorf("a client certificate without a CA was refused: %v", err)
	}
}
