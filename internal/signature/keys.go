package signature

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrKeys is wrapped by the errors about the key material of spec.verify.secretRef: only an
// edit of the Secret helps. Their messages name the Secret's keys, never their contents.
var ErrKeys = errors.New("invalid key material")

// maxKeyBytes bounds each public key read from the Secret; a PEM public key of RSA-8192 is
// under 1.5 kB.
const maxKeyBytes = 16 << 10

// PublicKey is one trusted public key of a Secret.
type PublicKey struct {
	// Name is the Secret's key it was read from.
	Name string
	// Key is an *ecdsa.PublicKey, *rsa.PublicKey or ed25519.PublicKey.
	Key crypto.PublicKey
	// Fingerprint is the hex SHA-256 of the key's PKIX encoding.
	Fingerprint string
}

// ParsePublicKeys reads the cosign public keys of a Secret's data: every entry whose key ends
// in ".pub" must hold exactly one PEM "PUBLIC KEY" block (PKIX: ECDSA, RSA or Ed25519), as
// `cosign generate-key-pair` writes it. Other entries are ignored. The keys come back in the
// order of their names.
func ParsePublicKeys(data map[string][]byte) ([]PublicKey, error) {
	var names []string
	for name := range data {
		if strings.HasSuffix(name, ".pub") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: the Secret has no public key (an entry whose name ends in .pub)", ErrKeys)
	}
	slices.Sort(names)
	keys := make([]PublicKey, 0, len(names))
	for _, name := range names {
		k, err := parsePublicKey(data[name])
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrKeys, name, err)
		}
		k.Name = name
		keys = append(keys, k)
	}
	return keys, nil
}

// parsePublicKey parses one entry. Its errors describe the entry's shape without quoting it.
func parsePublicKey(b []byte) (PublicKey, error) {
	if len(b) > maxKeyBytes {
		return PublicKey{}, fmt.Errorf("%d bytes, more than a public key's %d", len(b), maxKeyBytes)
	}
	block, rest := pem.Decode(b)
	if block == nil {
		return PublicKey{}, errors.New("not PEM-encoded")
	}
	if block.Type != "PUBLIC KEY" {
		// The type of a private key's block says what was put there by mistake; it is not secret.
		return PublicKey{}, fmt.Errorf("a PEM block of type %q, not PUBLIC KEY", truncate(block.Type, 40))
	}
	if p, _ := pem.Decode(rest); p != nil {
		return PublicKey{}, errors.New("more than one PEM block: one public key per entry")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return PublicKey{}, errors.New("not a PKIX public key")
	}
	switch k := key.(type) {
	case *ecdsa.PublicKey:
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return PublicKey{}, fmt.Errorf("an RSA key of %d bits, fewer than 2048", k.N.BitLen())
		}
	case ed25519.PublicKey:
	default:
		return PublicKey{}, fmt.Errorf("a %T key: only ECDSA, RSA and Ed25519 keys are supported", key)
	}
	sum := sha256.Sum256(block.Bytes)
	return PublicKey{Key: key, Fingerprint: hex.EncodeToString(sum[:])}, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
