package webhook

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"hash"
	"strings"
)

// Every comparison with the secret runs in constant time, and no error repeats what the sender
// sent in an authentication field, so a wrong guess learns nothing but "wrong".

// githubSignature checks X-Hub-Signature-256: "sha256=" and the hex HMAC-SHA256 of the body.
func githubSignature(req Request, secret []byte) error {
	return checkHMAC(req, secret, "X-Hub-Signature-256", "sha256=", sha256.New)
}

// nexusSignature checks X-Nexus-Webhook-Signature: the hex HMAC-SHA1 of the body. Nexus offers
// nothing stronger.
func nexusSignature(req Request, secret []byte) error {
	return checkHMAC(req, secret, "X-Nexus-Webhook-Signature", "", sha1.New)
}

// genericSignature checks X-Signature: "sha256=" and the hex HMAC-SHA256 of the body.
func genericSignature(req Request, secret []byte) error {
	return checkHMAC(req, secret, "X-Signature", "sha256=", sha256.New)
}

// jfrogAuth checks X-JFrog-Event-Auth, which JFrog fills with the hex HMAC-SHA256 of the body
// when the webhook signs its payloads, and with the secret itself when it does not.
func jfrogAuth(req Request, secret []byte) error {
	const header = "X-JFrog-Event-Auth"
	v := strings.TrimSpace(req.Header.Get(header))
	if v == "" {
		return unauthenticated("missing %s header", header)
	}
	// Both checks always run, so timing does not tell which form was close.
	signed := validHMAC(v, req.Body, secret, sha256.New)
	token := equalSecret(v, secret)
	if !signed && !token {
		return unauthenticated("%s is neither the body's signature nor the token", header)
	}
	return nil
}

// authorizationToken checks that the Authorization header is the token, bare or as
// "Bearer <token>": registries that cannot sign let the user configure a fixed header.
func authorizationToken(req Request, secret []byte) error {
	v := strings.TrimSpace(req.Header.Get("Authorization"))
	if v == "" {
		return unauthenticated("missing Authorization header")
	}
	bare := equalSecret(v, secret)
	bearer := false
	if scheme, token, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
		bearer = equalSecret(strings.TrimSpace(token), secret)
	}
	if !bare && !bearer {
		return unauthenticated("Authorization header does not carry the token")
	}
	return nil
}

// queryToken checks ?token=, for senders that can neither sign nor set headers. The caller
// must never log query strings.
func queryToken(req Request, secret []byte) error {
	v := req.Query.Get("token")
	if v == "" {
		return unauthenticated("missing token query parameter")
	}
	if !equalSecret(v, secret) {
		return unauthenticated("token query parameter does not match")
	}
	return nil
}

// checkHMAC checks that header holds prefix followed by the hex HMAC of the body.
func checkHMAC(req Request, secret []byte, header, prefix string, h func() hash.Hash) error {
	v := strings.TrimSpace(req.Header.Get(header))
	if v == "" {
		return unauthenticated("missing %s header", header)
	}
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return unauthenticated("%s does not start with %q", header, prefix)
	}
	if !validHMAC(v[len(prefix):], req.Body, secret, h) {
		return unauthenticated("%s does not match the body signed with the receiver's secret", header)
	}
	return nil
}

// validHMAC reports whether signature is the hex HMAC of body under secret.
func validHMAC(signature string, body, secret []byte, h func() hash.Hash) bool {
	got, err := hex.DecodeString(signature)
	if err != nil {
		return false
	}
	mac := hmac.New(h, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// equalSecret compares a presented token with the secret in constant time. Comparing hashes
// keeps the secret's length from showing in the timing too.
func equalSecret(token string, secret []byte) bool {
	a := sha256.Sum256([]byte(token))
	b := sha256.Sum256(secret)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
