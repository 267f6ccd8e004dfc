package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Sign sets the Proof of c's delta: an HMAC-SHA256, under key, of the whole event but the proof.
func (c *TagsChanged) Sign(key []byte) error {
	if c.Delta == nil {
		return errors.New("no delta to sign")
	}
	mac, err := c.mac(key)
	if err != nil {
		return err
	}
	c.Delta.Proof = base64.RawStdEncoding.EncodeToString(mac)
	return nil
}

// Verified returns c's delta when its proof is valid under key and its form is one a scan
// sends (CheckDelta), and otherwise an error that says why it is not to be applied.
func (c *TagsChanged) Verified(key []byte) (*TagsDelta, error) {
	if c.Delta == nil {
		return nil, errors.New("no delta")
	}
	if err := CheckDelta(c.Delta); err != nil {
		return nil, err
	}
	got, err := base64.RawStdEncoding.DecodeString(c.Delta.Proof)
	if err != nil || len(got) != sha256.Size {
		return nil, errors.New("the delta's proof is malformed")
	}
	want, err := c.mac(key)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(got, want) {
		return nil, errors.New("the delta's proof does not verify")
	}
	return c.Delta, nil
}

// mac computes the HMAC of c with its proof left out. encoding/json writes a struct's fields in
// their declared order, so sender and receiver of the same version hash the same bytes.
func (c *TagsChanged) mac(key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, errors.New("no key")
	}
	unsigned := *c
	d := *c.Delta
	d.Proof = ""
	unsigned.Delta = &d
	b, err := json.Marshal(unsigned)
	if err != nil {
		return nil, err
	}
	h := hmac.New(sha256.New, key)
	h.Write(b)
	return h.Sum(nil), nil
}

// CheckDelta refuses a delta that no scan sends: no tags or more than MaxDeltaTags, a tag that
// is not a tag, a duplicate, or a missing identity or revision.
func CheckDelta(d *TagsDelta) error {
	switch {
	case d.UID == "" || d.Image == "" || d.From == "":
		return errors.New("the delta names no identity or starting revision")
	case len(d.Added) == 0 || len(d.Added) > MaxDeltaTags:
		return fmt.Errorf("the delta adds %d tags; 1 to %d are allowed", len(d.Added), MaxDeltaTags)
	}
	seen := make(map[string]bool, len(d.Added))
	for _, a := range d.Added {
		if !ValidTag(a.Tag) {
			return fmt.Errorf("the delta adds %q, which is not a tag", Brief(a.Tag))
		}
		if seen[a.Tag] {
			return fmt.Errorf("the delta adds %q twice", a.Tag)
		}
		seen[a.Tag] = true
	}
	return nil
}

// ValidTag tells whether s is a tag by the OCI distribution spec's grammar,
// [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
func ValidTag(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case i > 0 && (c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
