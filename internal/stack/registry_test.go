package stack_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/imagereflector/reflector/internal/stack"
)

// TestRegistryAnswers: a registry's readiness is the answer of that registry only. A port the
// stack picked for docker-registry may be taken first by another test's server, such as an
// apiserver, which answers a plain HTTP request with 400, or by another docker-registry.
func TestRegistryAnswers(t *testing.T) {
	const data = "/tmp/stack/registry/data"
	registry := func(dir string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
			if dir != "" {
				w.Header().Set(stack.RegistryHeader, dir)
			}
			w.Write([]byte("{}"))
		}
	}
	tls := httptest.NewTLSServer(registry(data))
	defer tls.Close()
	for _, tc := range []struct {
		name string
		url  string
		ok   bool
	}{
		{"an HTTPS server on the port", "http://" + tls.Listener.Addr().String() + "/v2/", false},
		{"a registry that names no data directory", serve(t, registry("")), false},
		{"another stack's registry", serve(t, registry("/tmp/other/registry/data")), false},
		{"the stack's registry", serve(t, registry(data)), true},
	} {
		err := stack.RegistryAnswers(tc.url, data)
		if (err == nil) != tc.ok {
			t.Errorf("%s: RegistryAnswers = %v, want ready %v", tc.name, err, tc.ok)
		}
	}
}

// serve serves h over plain HTTP until t ends and returns the URL of its /v2/.
func serve(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL + "/v2/"
}
