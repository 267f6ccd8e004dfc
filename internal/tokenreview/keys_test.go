package tokenreview

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"
)

// signer makes tokens as the apiserver does: a compact JWT signed with RS256 or ES256, with the
// key's ID in the header.
type signer struct {
	kid string
	key crypto.Signer
}

func newRSASigner(t testing.TB, kid string) signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, key: k}
}

func newECSigner(t testing.TB, kid string) signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid: kid, key: k}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func jsonSegment(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b64(b)
}

// token signs claims with alg written in the header.
func (s signer) token(t testing.TB, alg string, claims map[string]any) string {
	t.Helper()
	signed := jsonSegment(t, map[string]string{"alg": alg, "kid": s.kid}) + "." + jsonSegment(t, claims)
	d := sha256.Sum256([]byte(signed))
	var sig []byte
	switch k := s.key.(type) {
	case *rsa.PrivateKey:
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:]); err != nil {
			t.Fatal(err)
		}
	case *ecdsa.PrivateKey:
		r, ss, err := ecdsa.Sign(rand.Reader, k, d[:])
		if err != nil {
			t.Fatal(err)
		}
		sig = append(r.FillBytes(make([]byte, 32)), ss.FillBytes(make([]byte, 32))...)
	}
	return signed + "." + b64(sig)
}

// keySetOf is the JSON Web Key Set of the signers' public keys.
func keySetOf(t testing.TB, signers ...signer) []byte {
	t.Helper()
	var keys []map[string]string
	for _, s := range signers {
		switch k := s.key.Public().(type) {
		case *rsa.PublicKey:
			keys = append(keys, map[string]string{"kty": "RSA", "kid": s.kid, "alg": "RS256", "use": "sig",
				"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
		case *ecdsa.PublicKey:
			raw, err := k.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, map[string]string{"kty": "EC", "kid": s.kid, "crv": "P-256", "alg": "ES256", "use": "sig",
				"x": b64(raw[1:33]), "y": b64(raw[33:])})
		}
	}
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// served is a key set source that counts its reads.
type served struct {
	set   []byte
	err   error
	reads int
}

func (s *served) fetch(context.Context) ([]byte, error) {
	s.reads++
	return s.set, s.err
}

func claims(aud any, sub string) map[string]any {
	return map[string]any{"aud": aud, "sub": sub, "iss": "https://kubernetes.default.svc", "exp": 4102444800}
}

func TestVerifyPrecheck(t *testing.T) {
	rs, ec := newRSASigner(t, "rsa-1"), newECSigner(t, "ec-1")
	forger := newRSASigner(t, "rsa-1") // claims the cluster's key ID
	src := &served{set: keySetOf(t, rs, ec)}
	v := &Verifier{audience: "reflector-webhook", namespaces: []string{"reflector-system"}, keys: &keySet{fetch: src.fetch}}
	now := time.Unix(1_800_000_000, 0)
	ok := claims([]string{"reflector-webhook"}, "system:serviceaccount:reflector-system:broker")

	alg := func(s signer, alg string) string {
		tok := s.token(t, "RS256", ok)
		parts := strings.SplitN(tok, ".", 2)
		return jsonSegment(t, map[string]string{"alg": alg, "kid": s.kid}) + "." + parts[1]
	}
	for name, c := range map[string]struct {
		token string
		want  error // nil: a review decides
	}{
		"RS256 of the cluster":          {rs.token(t, "RS256", ok), nil},
		"ES256 of the cluster":          {ec.token(t, "ES256", ok), nil},
		"audience as a string":          {rs.token(t, "RS256", claims("reflector-webhook", "system:serviceaccount:reflector-system:broker")), nil},
		"another key, the same key ID":  {forger.token(t, "RS256", ok), ErrUnauthenticated},
		"another audience":              {rs.token(t, "RS256", claims([]string{"somebody"}, "system:serviceaccount:reflector-system:broker")), ErrUnauthenticated},
		"a tenant's genuine token":      {rs.token(t, "RS256", claims([]string{"reflector-webhook"}, "system:serviceaccount:tenant:app")), ErrUnauthenticated},
		"not a ServiceAccount":          {rs.token(t, "RS256", claims([]string{"reflector-webhook"}, "admin")), ErrUnauthenticated},
		"alg none":                      {alg(rs, "none"), ErrUnauthenticated},
		"HS256 keyed by the public key": {alg(rs, "HS256"), ErrUnauthenticated},
		"ES256 named, RSA key":          {alg(rs, "ES256"), ErrUnauthenticated},
		"not a JWT":                     {"garbage", ErrUnauthenticated},
		"four segments":                 {rs.token(t, "RS256", ok) + ".x", ErrUnauthenticated},
		"claims not JSON":               {b64([]byte(`{"alg":"RS256","kid":"rsa-1"}`)) + "." + b64([]byte("[")) + ".AA", ErrUnauthenticated},
	} {
		_, err := v.precheck(context.Background(), c.token, now)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), c.token) {
			t.Errorf("%s: the error repeats the token", name)
		}
	}
	if src.reads != 1 {
		t.Errorf("the key set was read %d times, want 1", src.reads)
	}
}

// TestKeyRotation: an unknown key ID reads the set again, at most once per keysRefresh; in
// between such a token is answered errUnknownKey, which asks its sender to retry.
func TestKeyRotation(t *testing.T) {
	old, next := newRSASigner(t, "old"), newRSASigner(t, "next")
	src := &served{set: keySetOf(t, old)}
	v := &Verifier{audience: "a", keys: &keySet{fetch: src.fetch}}
	now := time.Unix(1_800_000_000, 0)
	c := claims("a", "system:serviceaccount:ns:sa")
	check := func(s signer, at time.Time) error {
		_, err := v.precheck(context.Background(), s.token(t, "RS256", c), at)
		return err
	}
	if err := check(old, now); err != nil {
		t.Fatal(err)
	}
	src.set = keySetOf(t, old, next)
	// The set was read just now: a new key waits for the next read.
	if err := check(next, now.Add(time.Second)); !errors.Is(err, errUnknownKey) {
		t.Fatalf("a key since added, within keysRefresh: %v, want errUnknownKey", err)
	}
	for _, kid := range []string{"made-up-1", "made-up-2", "made-up-3"} {
		if err := check(newRSASigner(t, kid), now.Add(2*time.Second)); !errors.Is(err, errUnknownKey) {
			t.Errorf("key ID %s within keysRefresh: %v, want errUnknownKey", kid, err)
		}
	}
	if src.reads != 1 {
		t.Fatalf("made-up key IDs within keysRefresh read the set %d times, want 1", src.reads)
	}
	if err := check(next, now.Add(keysRefresh)); err != nil {
		t.Fatalf("the new key after keysRefresh: %v", err)
	}
	if src.reads != 2 {
		t.Errorf("reads = %d, want 2", src.reads)
	}
	// A key ID that the fresh set lacks is forged.
	if err := check(newRSASigner(t, "nobody"), now.Add(2*keysRefresh)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a key ID the fresh set lacks: %v, want ErrUnauthenticated", err)
	}
}

// TestKeysUnreadable: when the set cannot be read, the review decides, and the set is not read
// again within keysRefresh.
func TestKeysUnreadable(t *testing.T) {
	s := newRSASigner(t, "k")
	src := &served{err: errors.New("forbidden")}
	v := &Verifier{audience: "a", namespaces: []string{"ns"}, keys: &keySet{fetch: src.fetch}}
	now := time.Unix(1_800_000_000, 0)
	for i := range 5 {
		// Unverified, the subject says nothing: the review decides even for another namespace.
		tok := s.token(t, "RS256", claims("a", "system:serviceaccount:other:sa"))
		if _, err := v.precheck(context.Background(), tok, now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatalf("with the keys unreadable: %v, want a review to decide", err)
		}
	}
	if src.reads != 1 {
		t.Errorf("reads = %d, want 1", src.reads)
	}
	src.set, src.err = keySetOf(t, s), nil
	if _, err := v.precheck(context.Background(), s.token(t, "RS256", claims("a", "system:serviceaccount:other:sa")), now.Add(keysRefresh)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("once read, a genuine token of another namespace: %v, want ErrUnauthenticated", err)
	}
}

// FuzzPrecheck: no input makes the check pass a token that the cluster's key did not sign, and
// none makes it panic.
func FuzzPrecheck(f *testing.F) {
	s := newRSASigner(f, "k")
	src := &served{set: keySetOf(f, s)}
	v := &Verifier{audience: "a", keys: &keySet{fetch: src.fetch}}
	genuine := map[string]bool{}
	for _, sub := range []string{"system:serviceaccount:ns:sa", "x"} {
		tok := s.token(f, "RS256", claims([]string{"a", "b"}, sub))
		genuine[tok[:strings.LastIndex(tok, ".")]] = true
		f.Add(tok)
	}
	f.Add("a.b.c")
	f.Add("")
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, token string) {
		_, err := v.precheck(context.Background(), token, now)
		if err == nil {
			signed := token[:strings.LastIndex(token, ".")]
			if !genuine[signed] {
				t.Fatalf("passed a token the key did not sign: %q", token)
			}
		}
	})
}

// BenchmarkPrecheckForged is the cost of refusing one forged token whose header names the
// cluster's key: the parse and one RSA-2048 signature check.
func BenchmarkPrecheckForged(b *testing.B) {
	rs, forger := newRSASigner(b, "k"), newRSASigner(b, "k")
	src := &served{set: keySetOf(b, rs)}
	v := &Verifier{audience: "a", keys: &keySet{fetch: src.fetch}}
	token := forger.token(b, "RS256", claims("a", "system:serviceaccount:ns:sa"))
	now := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.precheck(context.Background(), token, now); !errors.Is(err, ErrUnauthenticated) {
			b.Fatal(err)
		}
	}
}
