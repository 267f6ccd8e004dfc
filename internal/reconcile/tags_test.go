package reconcile

import (
	"slices"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/registry"
)

func TestValidHint(t *testing.T) {
	var invalid registry.InvalidTags
	hint := &Hint{Tags: []string{"v1", "\x1b[31mred", strings.Repeat("a", 10_000), "v2\u202e", "v3"}, More: 2}
	got := validHint(hint, &invalid)
	if !slices.Equal(got.Tags, []string{"v1", "v3"}) || got.More != 2 {
		t.Errorf("validHint = %+v", got)
	}
	if invalid.Count != 3 || invalid.Example != "\x1b[31mred" {
		t.Errorf("invalid = %+v", invalid)
	}
	if valid := (&Hint{Tags: []string{"v1"}}); validHint(valid, &invalid) != valid {
		t.Error("a valid hint is copied")
	}
	if validHint(nil, &invalid) != nil {
		t.Error("no hint became one")
	}
}

func TestScanMessage(t *testing.T) {
	if got, want := scanMessage(6, registry.InvalidTags{}), "successful scan: found 6 tags"; got != want {
		t.Errorf("scanMessage = %q, want %q", got, want)
	}
	var invalid registry.InvalidTags
	invalid.Keep([]string{"v1\x7f", strings.Repeat("\u202e", 3000)})
	got := scanMessage(6, invalid)
	if !strings.HasPrefix(got, `successful scan: found 6 tags; left out 2 tags that are not valid tag names`) || !strings.HasSuffix(got, `such as "v1\x7f"`) {
		t.Errorf("scanMessage = %q", got)
	}
}

func TestLatestTagsLeavesOutInvalidTags(t *testing.T) {
	got := latestTags([]string{"a", "b", "c\x1b", "d", "\u202ez"})
	if want := []string{"d", "b", "a"}; !slices.Equal(got, want) {
		t.Errorf("latestTags = %q, want %q", got, want)
	}
}
