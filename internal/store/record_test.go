package store

import (
	"encoding/json"
	"slices"
	"testing"
)

// The fast decoder agrees with encoding/json on every list the store
// writes, and hands anything unusual to it.
func TestSplitTags(t *testing.T) {
	lists := [][]string{
		{},
		{""},
		{"v1"},
		{"a,b", "c"},
		{"1.0", "1.0-rc.1", "latest", "sha-0123abc"},
		{`quo"te`, `back\slash`, "<html>", "tab\t", "ünïcode"},
	}
	for _, list := range lists {
		b, _ := json.Marshal(list)
		got, err := decodeTags(b, revisionOfValue(b))
		if err != nil || !slices.Equal(got, list) {
			t.Errorf("decodeTags(%s) = %q, %v; want %q", b, got, err, list)
		}
	}
	for _, bad := range []string{``, `[`, `["a"`, `["a",]`, `[,"a"]`, `["a" ]`, `["a""b"]`, `{}`, `[1]`} {
		if tags, ok := splitTags([]byte(bad)); ok {
			t.Errorf("splitTags(%s) = %q, want a fallback", bad, tags)
		}
	}
}

// A value that does not hash to its revision is reported, not used.
func TestDecodeTagsChecksRevision(t *testing.T) {
	b, rev := encodeTags([]string{"v1"})
	if _, err := decodeTags([]byte(`["v2"]`), rev); err == nil {
		t.Error("decodeTags accepted a value that does not match its revision")
	}
	if _, err := decodeTags(b, rev); err != nil {
		t.Error(err)
	}
}
