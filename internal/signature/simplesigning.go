package signature

import (
	"encoding/json"
	"errors"
	"fmt"
)

// simpleSigningType is the critical.type of the payloads cosign signs for an image.
const simpleSigningType = "cosign container image signature"

// maxPayloadBytes bounds a simple-signing payload; cosign's are a few hundred bytes, plus the
// annotations a signer adds with -a.
const maxPayloadBytes = 64 << 10

// ImageDigestOf returns the image digest that a cosign simple-signing payload (the Red Hat
// "atomic container signature" format cosign writes on the legacy ".sig" tag) vouches for:
// critical.image.docker-manifest-digest of a payload whose critical.type is cosign's. The
// payload must have been authenticated first; this only reads it.
func ImageDigestOf(payload []byte) (string, error) {
	if len(payload) > maxPayloadBytes {
		return "", fmt.Errorf("a payload of %d bytes, more than %d", len(payload), maxPayloadBytes)
	}
	var p struct {
		Critical *struct {
			Image *struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return "", fmt.Errorf("not a simple-signing payload: %w", err)
	}
	switch {
	case p.Critical == nil:
		return "", errors.New("not a simple-signing payload: no critical section")
	case p.Critical.Type != simpleSigningType:
		return "", fmt.Errorf("a payload of type %q, not %q", truncate(p.Critical.Type, 80), simpleSigningType)
	case p.Critical.Image == nil || p.Critical.Image.Digest == "":
		return "", errors.New("a payload without critical.image.docker-manifest-digest")
	}
	return p.Critical.Image.Digest, nil
}
