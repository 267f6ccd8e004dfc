package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestRevisionOf(t *testing.T) {
	sha := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	tests := []struct {
		name string
		tags []string
		want string
	}{
		{"nil is the empty list", nil, sha(`[]`)},
		{"empty", []string{}, sha(`[]`)},
		{"one tag", []string{"v1"}, sha(`["v1"]`)},
		{"sorted bytewise", []string{"v1.10", "latest", "v1.9"}, sha(`["latest","v1.10","v1.9"]`)},
		{"duplicates count once", []string{"b", "a", "b"}, sha(`["a","b"]`)},
		{"tags outside the grammar are left out", []string{"a,b", "v1", "v1+build", ""}, sha(`["v1"]`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RevisionOf(tt.tags); got != tt.want {
				t.Errorf("RevisionOf(%q) = %s, want %s", tt.tags, got, tt.want)
			}
		})
	}
	if RevisionOf([]string{"a", "b"}) == RevisionOf([]string{"a"}) {
		t.Error("different lists share a revision")
	}
}

func TestRevisionDoesNotModifyInput(t *testing.T) {
	in := []string{"b", "a", "b"}
	RevisionOf(in)
	if in[0] != "b" || in[1] != "a" || in[2] != "b" {
		t.Errorf("RevisionOf reordered its argument: %q", in)
	}
}

// FuzzEncodeTags: the stored form of any list of strings is encoding/json's, so that a revision
// never depends on which of the two encodings wrote it; a list encodes unchanged through splitTags.
func FuzzEncodeTags(f *testing.F) {
	f.Add("v1.0.0\x00v1.1.0-rc.1\x00latest")
	f.Add("")
	f.Add("a<b\x00\"\x00\\\x00caf\u00e9\x00\x7f")
	f.Fuzz(func(t *testing.T, joined string) {
		tags := strings.Split(joined, "\x00")
		want, err := json.Marshal(tags)
		if err != nil {
			t.Fatal(err)
		}
		got, rev := encodeTags(tags)
		if !bytes.Equal(got, want) {
			t.Fatalf("encodeTags(%q) = %s, encoding/json says %s", tags, got, want)
		}
		if rev != revisionOfValue(want) {
			t.Fatalf("revision %s is not the hash of %s", rev, want)
		}
		if back, ok := splitTags(got); ok && !slices.Equal(back, tags) {
			t.Fatalf("splitTags(%s) = %q, want %q", got, back, tags)
		}
	})
}

func TestEncodeTagsEmptyAndNil(t *testing.T) {
	for _, tc := range []struct {
		tags []string
		want string
	}{{[]string{}, "[]"}, {nil, "null"}, {[]string{"1.0"}, `["1.0"]`}} {
		if got, _ := encodeTags(tc.tags); string(got) != tc.want {
			t.Errorf("encodeTags(%#v) = %s, want %s", tc.tags, got, tc.want)
		}
	}
}
