package reconcile

import (
	"fmt"
	"slices"
	"testing"
)

// The status sample is Flux's: the last ten tags of the ascending list, greatest first.
func TestLatestTagsSample(t *testing.T) {
	var tags []string
	for i := 1; i <= 25; i++ {
		tags = append(tags, fmt.Sprintf("build-%04d", i))
	}
	want := []string{"build-0025", "build-0024", "build-0023", "build-0022", "build-0021",
		"build-0020", "build-0019", "build-0018", "build-0017", "build-0016"}
	if got := latestTags(tags); !slices.Equal(got, want) {
		t.Errorf("latestTags = %q, want %q", got, want)
	}
	if got := latestTags([]string{"a", "b"}); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("latestTags of two = %q", got)
	}
	if got := latestTags(nil); len(got) != 0 {
		t.Errorf("latestTags of none = %q", got)
	}
}
