package signature

import (
	"bytes"
	"strings"
	"testing"
)

const fuzzKey = `-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEr5T8yJZCVC1pV7zKsDVCBV1smWvP
5kRrlVFBQDUxnSXrBsdxv8mEULbB1jZ1V3v3JkHf6qYjWXH2NpyvdCv6vA==
-----END PUBLIC KEY-----
`

// FuzzParsePublicKeys feeds arbitrary Secret entries to the key parser: it must not panic, and
// its errors must never quote the entry.
func FuzzParsePublicKeys(f *testing.F) {
	f.Add("cosign.pub", []byte(fuzzKey))
	f.Add("cosign.pub", []byte(fuzzKey+fuzzKey))
	f.Add("a.pub", []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add("a.pub", []byte("-----BEGIN PUBLIC KEY-----\nMAA=\n-----END PUBLIC KEY-----\n"))
	f.Add("x.key", []byte("secret"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		keys, err := ParsePublicKeys(map[string][]byte{name: data})
		if err != nil {
			if len(data) >= 8 && bytes.Contains([]byte(err.Error()), data) {
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
