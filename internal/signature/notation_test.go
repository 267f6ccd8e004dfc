package signature

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
