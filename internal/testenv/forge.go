package testenv

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// Forger makes JWTs that look like ServiceAccount tokens of a cluster: RS256, their header
// naming the key ID of the cluster's signing key, but signed by a key of the Forger's own.
type Forger struct {
	kid string
	key *rsa.PrivateKey
}

// NewForger returns a Forger that names the key ID of the genuine token's signing key.
func NewForger(genuine string) (*Forger, error) {
	header, _, _ := strings.Cut(genuine, ".")
	b, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		return nil, err
	}
	var h struct {
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(b, &h); err != nil || h.Kid == "" {
		return nil, errors.New("the genuine token's header names no key ID")
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &Forger{kid: h.Kid, key: key}, nil
}

// Token returns a forged token with claims.
func (f *Forger) Token(claims map[string]any) (string, error) {
	hb, err := json.Marshal(map[string]string{"alg": "RS256", "kid": f.kid})
	if err != nil {
		return "", err
	}
	cb, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signed := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	d := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, f.key, crypto.SHA256, d[:])
	if err != nil {
		return "", err
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}
