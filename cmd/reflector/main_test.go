package main

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCAFile: the webhook route's probe trusts a private CA only when --ca-file names it.
func TestCAFile(t *testing.T) {
	route := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer route.Close()
	if !strings.HasPrefix(route.URL, "https://127.0.0.1:") {
		t.Fatalf("test server at %s, not 127.0.0.1", route.URL)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: route.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	trusting, err := httpProber(ca)
	if err != nil {
		t.Fatal(err)
	}
	if err := trusting(ctx, route.URL+"/healthz"); err != nil {
		t.Errorf("with --ca-file of the route's CA: %v", err)
	}
	if err := trusting(ctx, route.URL+"/other"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a path that answers 404: %v, want the status", err)
	}
	system, err := httpProber("")
	if err != nil {
		t.Fatal(err)
	}
	if err := system(ctx, route.URL+"/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without --ca-file: %v, want a certificate error", err)
	}
}
