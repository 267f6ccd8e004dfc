package store

import (
	"crypto/sha256"
	"encoding/hex"
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
