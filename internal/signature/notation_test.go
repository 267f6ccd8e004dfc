package signature

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestBoundedTransport checks the bound on the OCSP responses and CRLs that revocation checks
// read: a body of the bound is read whole, one byte more fails.
func TestBoundedTransport(t *testing.T) {
	const limit = 1000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := limit
		if r.URL.Path == "/over" {
			n++
		}
		io.WriteString(w, strings.Repeat("x", n))
	}))
	defer srv.Close()
	client := &http.Client{Transport: boundedTransport{http.DefaultTransport, limit}}
	for path, fail := range map[string]bool{"/at": false, "/over": true} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if (err != nil) != fail || (!fail && len(b) != limit) {
			t.Errorf("%s: read %d bytes, error %v; want failure %v", path, len(b), err, fail)
		}
	}
}

// TestNotationReference checks the artifact reference that the trust policy's registryScopes
// are matched against: as Notation names artifacts, Docker Hub as docker.io.
func TestNotationReference(t *testing.T) {
	h, _ := ggcrv1.NewHash("sha256:" + strings.Repeat("a", 64))
	for in, want := range map[string]string{
		"localhost:5000/app":       "localhost:5000/app",
		"127.0.0.1:5000/team/app":  "127.0.0.1:5000/team/app",
		"registry.example.com/a/b": "registry.example.com/a/b",
		"nginx":                    "docker.io/library/nginx",
		"docker.io/org/app":        "docker.io/org/app",
		"ghcr.io/org/app":          "ghcr.io/org/app",
	} {
		repo, err := name.NewRepository(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := notationReference(repo, h); got != want+"@"+h.String() {
			t.Errorf("notationReference(%s) = %s, want %s@%s", in, got, want, h)
		}
	}
}
