package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/imagereflector/reflector/internal/imagename"
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
		if !imagename.ValidTag(a.Tag) {
			return fmt.Errorf("the delta adds %q, which is not a tag", Brief(a.Tag))
		}
		if seen[a.Tag] {
			return fmt.Errorf("the delta adds %q twice", a.Tag)
		}
		seen[a.Tag] = true
	}
	return nil
}
