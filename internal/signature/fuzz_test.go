package signature

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

const fuzzKey = `-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEr5T8yJZCVC1pV7zKsDVCBV1smWvP
5kRrlVFBQDUxnSXrBsdxv8mEULbB1jZ1V3v3JkHf6qYjWXH2NpyvdCv6vA==
-----END PUBLIC KEY-----
`

// FuzzParsePublicKeys feeds arbitrary Secret entries to the key parser: it must not panic, and
// its errors must never quote the entry's data. They may name the entry: a name is not secret,
// and one can hold the data's bytes, so the check leaves the quoted name out.
func FuzzParsePublicKeys(f *testing.F) {
	f.Add("cosign.pub", []byte(fuzzKey))
	f.Add("cosign.pub", []byte(fuzzKey+fuzzKey))
	f.Add("a.pub", []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add("a.pub", []byte("-----BEGIN PUBLIC KEY-----\nMAA=\n-----END PUBLIC KEY-----\n"))
	f.Add("x.key", []byte("secret"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		keys, err := ParsePublicKeys(map[string][]byte{name: data})
		if err != nil {
			if quotesEntry(err, name, data) {
				t.Fatalf("error %q quotes the entry", err)
			}
			return
		}
		if len(keys) != 1 || keys[0].Name != name || !strings.HasSuffix(name, ".pub") || len(keys[0].Fingerprint) != 64 {
			t.Fatalf("ParsePublicKeys() = %+v", keys)
		}
	})
}

// FuzzImageDigestOf feeds arbitrary payloads to the simple-signing reader: it must not panic,
// and a payload it accepts names a digest.
func FuzzImageDigestOf(f *testing.F) {
	f.Add([]byte(`{"critical":{"identity":{"docker-reference":"r/app"},"image":{"docker-manifest-digest":"sha256:abc"},"type":"cosign container image signature"},"optional":null}`))
	f.Add([]byte(`{"critical":{"image":{"docker-manifest-digest":""},"type":"cosign container image signature"}}`))
	f.Add([]byte(`{"critical":{"type":"atomic container signature"}}`))
	f.Add([]byte(`{"critical":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		d, err := ImageDigestOf(payload)
		if err == nil && d == "" {
			t.Fatalf("ImageDigestOf(%q) = %q", payload, d)
		}
	})
}

// fuzzCA is a self-signed CA certificate, PEM-encoded, as a trust store's ca.crt holds one.
func fuzzCA(f *testing.F) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fuzz CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		f.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// FuzzParseTrustStore feeds arbitrary Secret entries to the Notation trust store reader: it must
// not panic, its errors must never quote the entry, and what it accepts is certificates.
func FuzzParseTrustStore(f *testing.F) {
	ca := fuzzCA(f)
	block, _ := pem.Decode(ca)
	f.Add("ca.crt", ca)
	f.Add("ca.pem", append(append([]byte{}, ca...), ca...))
	f.Add("ca.crt", block.Bytes)
	f.Add("ca.crt", append(append([]byte{}, ca...), "trailing"...))
	f.Add("ca.crt", []byte("-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0\n-----END EC PRIVATE KEY-----\n"))
	f.Add("ca.pem", []byte("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n"))
	f.Add("x.pub", []byte(fuzzKey))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		certs, err := parseTrustStore(map[string][]byte{name: data})
		if err != nil {
			if !errors.Is(err, ErrKeys) {
				t.Fatalf("error %v does not wrap ErrKeys", err)
			}
			if quotesEntry(err, name, data) {
				t.Fatalf("error %q quotes the entry", err)
			}
			return
		}
		if len(certs) == 0 || len(certs) > maxCertificates || !(strings.HasSuffix(name, ".crt") || strings.HasSuffix(name, ".pem")) {
			t.Fatalf("parseTrustStore(%q) = %d certificates", name, len(certs))
		}
	})
}

// FuzzParseTrustPolicy feeds arbitrary trustpolicy.json entries to the trust policy reader: it
// must not panic, its errors wrap ErrKeys and are bounded, and a document it accepts is valid.
func FuzzParseTrustPolicy(f *testing.F) {
	f.Add([]byte(`{"version":"1.0","trustPolicies":[{"name":"p","registryScopes":["r.example/app"],"signatureVerification":{"level":"strict"},"trustStores":["ca:s"],"trustedIdentities":["*"]}]}`))
	f.Add([]byte(`{"version":"1.0","trustPolicies":[{"name":"p","registryScopes":["*"],"signatureVerification":{"level":"skip"}}]}`))
	f.Add([]byte(`{"version":"1.0","trustPolicies":[{"name":"p","registryScopes":["*"],"signatureVerification":{"level":"audit","override":{"revocation":"skip"}},"trustStores":["ca:s"],"trustedIdentities":["x509.subject: CN=a, O=b"]}]}`))
	f.Add([]byte(`{"version":"2.0","trustPolicies":[]}`))
	f.Add([]byte(`{"version":"1.0"} {}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := parseTrustPolicy(map[string][]byte{TrustPolicyKey: data})
		if err != nil {
			if !errors.Is(err, ErrKeys) || len(err.Error()) > 600 {
				t.Fatalf("error %q does not wrap ErrKeys or is unbounded", err)
			}
			return
		}
		if doc.Validate() != nil {
			t.Fatalf("parseTrustPolicy accepted an invalid document %q", data)
		}
	})
}

// FuzzParseTUFURL feeds arbitrary mirror URLs to the check of REFLECTOR_SIGSTORE_TUF_URL: it
// must not panic, and what it accepts is an http(s) URL with a host and nothing that could be a
// credential, which it accepts again unchanged.
func FuzzParseTUFURL(f *testing.F) {
	for _, s := range []string{"https://tuf-repo-cdn.sigstore.dev", "http://127.0.0.1:8080/tuf/", "https://u:p@h/",
		"https://h/?q=1", "https://h/#f", "https://h/a%2Fb", "https://[::1]:443/x", "HTTPS://H", "https:h", "//h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTUFURL(s)
		if err != nil {
			if strings.Contains(err.Error(), s) && len(s) >= 8 {
				t.Fatalf("error %q quotes the URL", err)
			}
			return
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("ParseTUFURL(%q) = %q, which does not parse: %v", s, got, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
			strings.HasSuffix(got, "/") {
			t.Fatalf("ParseTUFURL(%q) = %q", s, got)
		}
		if again, err := ParseTUFURL(got); err != nil || again != got {
			t.Fatalf("ParseTUFURL(%q) = %q, then %q, %v", s, got, again, err)
		}
	})
}

// quotesEntry tells whether err, a parser's error about the Secret entry name, holds the entry's
// data (of 8 bytes or more) beyond the quoted name, which may hold the same bytes.
func quotesEntry(err error, name string, data []byte) bool {
	said := strings.ReplaceAll(err.Error(), strconv.Quote(name), "")
	return len(data) >= 8 && bytes.Contains([]byte(said), data)
}
