package events

import (
	"fmt"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/imagename"
)

func signedChange(t *testing.T, key []byte) TagsChanged {
	t.Helper()
	c := TagsChanged{Namespace: "apps", Name: "web", Revision: "sha256:to", Delta: &TagsDelta{
		UID: "uid-1", Image: "registry.test/web", Listing: "sha256:l", From: "sha256:from",
		Added: []AddedTag{{Tag: "1.2.3", Digest: "sha256:d1"}},
	}}
	if err := c.Sign(key); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDeltaVerifies(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	c := signedChange(t, key)
	d, err := c.Verified(key)
	if err != nil || d != c.Delta {
		t.Fatalf("Verified = %v, %v; want the delta", d, err)
	}
}

// TestDeltaRefused: a delta is applied only as the scan sent it, under the store's key; any
// change of what it says, or another key, makes it a mere trigger.
func TestDeltaRefused(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	for _, tc := range []struct {
		name   string
		change func(*TagsChanged)
		key    []byte
		want   string
	}{
		{name: "another key", key: []byte(strings.Repeat("x", 32)), want: "does not verify"},
		{name: "no key", key: []byte{}, want: "no key"},
		{name: "tag", change: func(c *TagsChanged) { c.Delta.Added[0].Tag = "9.9.9" }, want: "does not verify"},
		{name: "digest", change: func(c *TagsChanged) { c.Delta.Added[0].Digest = "sha256:evil" }, want: "does not verify"},
		{name: "revision", change: func(c *TagsChanged) { c.Revision = "sha256:other" }, want: "does not verify"},
		{name: "from", change: func(c *TagsChanged) { c.Delta.From = "sha256:other" }, want: "does not verify"},
		{name: "object", change: func(c *TagsChanged) { c.Name = "other" }, want: "does not verify"},
		{name: "identity", change: func(c *TagsChanged) { c.Delta.UID = "uid-2" }, want: "does not verify"},
		{name: "added tag", change: func(c *TagsChanged) {
			c.Delta.Added = append(c.Delta.Added, AddedTag{Tag: "2.0.0", Digest: "sha256:d2"})
		}, want: "does not verify"},
		{name: "no proof", change: func(c *TagsChanged) { c.Delta.Proof = "" }, want: "malformed"},
		{name: "proof not base64", change: func(c *TagsChanged) { c.Delta.Proof = "!!" }, want: "malformed"},
		{name: "not a tag", change: func(c *TagsChanged) { c.Delta.Added[0].Tag = "\x1b[31mred" }, want: "not a tag"},
		{name: "no tags", change: func(c *TagsChanged) { c.Delta.Added = nil }, want: "adds 0 tags"},
		{name: "too many tags", change: func(c *TagsChanged) {
			for i := range MaxDeltaTags {
				c.Delta.Added = append(c.Delta.Added, AddedTag{Tag: "t" + strings.Repeat("1", i+1)})
			}
		}, want: "adds 17 tags"},
		{name: "duplicate", change: func(c *TagsChanged) { c.Delta.Added = append(c.Delta.Added, c.Delta.Added[0]) }, want: "twice"},
		{name: "no identity", change: func(c *TagsChanged) { c.Delta.Image = "" }, want: "no identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := signedChange(t, key)
			if tc.change != nil {
				tc.change(&c)
			}
			k := key
			if tc.key != nil {
				k = tc.key
			}
			d, err := c.Verified(k)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verified = %v, %v; want an error containing %q", d, err, tc.want)
			}
		})
	}
}

// FuzzDeltaVerified: whatever a sender puts in a delta, Verified never panics and accepts it
// only with a valid proof and tags of the distribution grammar.
func FuzzDeltaVerified(f *testing.F) {
	f.Add("uid", "img", "from", "1.0.0", "sha256:d", "proof")
	f.Fuzz(func(t *testing.T, uid, image, from, tag, digest, proof string) {
		key := []byte(strings.Repeat("k", 32))
		c := TagsChanged{Namespace: "ns", Name: "n", Revision: "r", Delta: &TagsDelta{
			UID: uid, Image: image, From: from, Added: []AddedTag{{Tag: tag, Digest: digest}}, Proof: proof}}
		if d, err := c.Verified(key); err == nil && (!imagename.ValidTag(d.Added[0].Tag) || d.Proof != proof) {
			t.Fatalf("accepted %+v", d)
		}
		if err := c.Sign(key); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verified(key); err != nil && imagename.ValidTag(tag) && uid != "" && image != "" && from != "" {
			t.Fatalf("a signed delta does not verify: %v", err)
		}
	})
}

func TestAttachedDigests(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	c := TagsChanged{Attached: []string{"sha256:" + hex, "sha256:" + strings.ToUpper(hex), "sha512:" + hex,
		"sha256:" + hex[:63], hex, ""}}
	if got := c.AttachedDigests(); fmt.Sprint(got) != "[sha256:"+hex+"]" {
		t.Errorf("AttachedDigests() = %q, want only the well-formed sha256 digest", got)
	}
	c.Attached = nil
	for i := range MaxAttached + 5 {
		c.Attached = append(c.Attached, fmt.Sprintf("sha256:%064x", i))
	}
	if got := c.AttachedDigests(); len(got) != MaxAttached {
		t.Errorf("AttachedDigests() kept %d of %d digests, want at most %d", len(got), len(c.Attached), MaxAttached)
	}
}
