package tokenreview

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"strings"
	"sync"
	"time"
)

// keysRefresh is the shortest time between two reads of the apiserver's key set. A token signed
// with a key the Verifier does not know leads to a read, at most this often, so tokens with made
// up key IDs cost the apiserver at most one read per period.
const keysRefresh = 10 * time.Second

// errUnknownKey answers a token whose key ID is not among the keys read less than keysRefresh
// ago: a key the apiserver started signing with since then is learnt at the next read.
var errUnknownKey = errors.New("the token's signing key is not known yet; retry later")

// keySet holds the public keys that sign the cluster's ServiceAccount tokens, read from the
// apiserver. It refuses, without a TokenReview, a token that none of them signed: a review then
// costs the apiserver only for tokens that the cluster issued.
type keySet struct {
	fetch func(context.Context) ([]byte, error)

	reading sync.Mutex
	mu      sync.Mutex
	keys    map[string]crypto.PublicKey // by key ID
	read    time.Time                   // of the last attempt
	readErr error                       // of the last attempt
}

// verify tells whether the cluster's keys signed t: true when they did, false with no error
// when they could not be read (a review decides then, as without them), and an error wrapping
// ErrUnauthenticated when they did not, or errUnknownKey.
func (k *keySet) verify(ctx context.Context, t *jwt, now time.Time) (bool, error) {
	key, err := k.key(ctx, t.keyID, now)
	switch {
	case errors.Is(err, errUnknownKey), errors.Is(err, ErrUnauthenticated):
		return false, err
	case err != nil:
		return false, nil
	}
	if !t.verify(key) {
		return false, fmt.Errorf("%w: the token's signature is not the cluster's", ErrUnauthenticated)
	}
	return true, nil
}

// key returns the key of id, reading the key set again when it holds no such key and its last
// read is keysRefresh old. An error that wraps neither ErrUnauthenticated nor errUnknownKey
// means the set could not be read.
func (k *keySet) key(ctx context.Context, id string, now time.Time) (crypto.PublicKey, error) {
	if key, ok := k.known(id); ok {
		return key, nil
	}
	// One read at a time; who waited for it finds its keys.
	k.reading.Lock()
	defer k.reading.Unlock()
	if key, ok := k.known(id); ok {
		return key, nil
	}
	k.mu.Lock()
	last, lastErr := k.read, k.readErr
	k.mu.Unlock()
	if !last.IsZero() && now.Sub(last) < keysRefresh {
		if lastErr != nil {
			return nil, lastErr
		}
		return nil, errUnknownKey
	}
	ctx, cancel := context.WithTimeout(ctx, keysTimeout)
	defer cancel()
	var keys map[string]crypto.PublicKey
	b, err := k.fetch(ctx)
	if err == nil {
		keys, err = parseKeySet(b)
	}
	if err != nil {
		err = fmt.Errorf("reading the cluster's token keys: %w", err)
	}
	k.mu.Lock()
	k.read, k.readErr = now, err
	if err == nil {
		k.keys = keys
	}
	k.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if key, ok := keys[id]; ok {
		return key, nil
	}
	return nil, fmt.Errorf("%w: no key of the cluster has the token's key ID", ErrUnauthenticated)
}

// known returns the key of id from the last read.
func (k *keySet) known(id string) (crypto.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.keys[id]
	return key, ok
}

// keysTimeout bounds a read of the key set.
const keysTimeout = 5 * time.Second

// jwt is a parsed JSON Web Token in compact form.
type jwt struct {
	alg, keyID string
	audiences  []string
	subject    string
	signed     string // header.payload, what the signature covers
	signature  []byte
}

// parseJWT reads a compact JWT's header, audience, subject and signature, without checking
// anything else.
func parseJWT(token string) (*jwt, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("the token is not a JWT")
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := decodeSegment(parts[0], &header); err != nil {
		return nil, fmt.Errorf("the token's header: %w", err)
	}
	var claims struct {
		Aud audience `json:"aud"`
		Sub string   `json:"sub"`
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return nil, fmt.Errorf("the token's claims: %w", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, errors.New("the token's signature is not base64url")
	}
	return &jwt{alg: header.Alg, keyID: header.Kid, audiences: claims.Aud, subject: claims.Sub,
		signed: parts[0] + "." + parts[1], signature: sig}, nil
}

// decodeSegment decodes a base64url JSON segment of a JWT into v.
func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return errors.New("not base64url")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errors.New("not a JSON object")
	}
	return nil
}

// audience is the aud claim, a string or an array of strings.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// verify tells whether key made the token's signature with the token's algorithm; an algorithm
// that does not fit the key's type never verifies.
func (t *jwt) verify(key crypto.PublicKey) bool {
	switch key := key.(type) {
	case *rsa.PublicKey:
		h, id := digest(t.alg, "RS")
		return h != nil && rsa.VerifyPKCS1v15(key, id, sum(h, t.signed), t.signature) == nil
	case *ecdsa.PublicKey:
		h, _ := digest(t.alg, "ES")
		size := (key.Curve.Params().BitSize + 7) / 8
		if h == nil || len(t.signature) != 2*size {
			return false
		}
		r := new(big.Int).SetBytes(t.signature[:size])
		s := new(big.Int).SetBytes(t.signature[size:])
		return ecdsa.Verify(key, sum(h, t.signed), r, s)
	}
	return false
}

// digest returns the hash of a JWS algorithm of family ("RS" or "ES"), nil for any other.
func digest(alg, family string) (hash.Hash, crypto.Hash) {
	switch alg {
	case family + "256":
		return sha256.New(), crypto.SHA256
	case family + "384":
		return sha512.New384(), crypto.SHA384
	case family + "512":
		return sha512.New(), crypto.SHA512
	}
	return nil, 0
}

func sum(h hash.Hash, s string) []byte {
	h.Write([]byte(s))
	return h.Sum(nil)
}

// parseKeySet reads a JSON Web Key Set of RSA and EC public keys by key ID; keys of other types
// are left out.
func parseKeySet(b []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("the key set: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		var key crypto.PublicKey
		var err error
		switch k.Kty {
		case "RSA":
			key, err = rsaKey(k.N, k.E)
		case "EC":
			key, err = ecKey(k.Crv, k.X, k.Y)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.Kid, err)
		}
		keys[k.Kid] = key
	}
	return keys, nil
}

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nb, err := base64.RawURLEncoding.DecodeString(n)
	if err != nil || len(nb) == 0 {
		return nil, errors.New("a bad modulus")
	}
	eb, err := base64.RawURLEncoding.DecodeString(e)
	if err != nil || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New("a bad exponent")
	}
	exp := new(big.Int).SetBytes(eb).Int64()
	return &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: int(exp)}, nil
}

func ecKey(crv, x, y string) (*ecdsa.PublicKey, error) {
	var curve elliptic.Curve
	switch crv {
	case "P-256":
		curve = elliptic.P256()
	case "P-384":
		curve = elliptic.P384()
	case "P-521":
		curve = elliptic.P521()
	default:
		return nil, fmt.Errorf("the curve %q", crv)
	}
	size := (curve.Params().BitSize + 7) / 8
	xb, errX := base64.RawURLEncoding.DecodeString(x)
	yb, errY := base64.RawURLEncoding.DecodeString(y)
	if errX != nil || errY != nil || len(xb) != size || len(yb) != size {
		return nil, errors.New("bad coordinates")
	}
	return ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, xb...), yb...))
}
