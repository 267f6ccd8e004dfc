package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/registry"
)

func TestListingIsChosenWhenItCostsFewerRequests(t *testing.T) {
	cost := registry.New().ListingRequests
	tags := func(n int) *Hint {
		h := &Hint{}
		for i := range n {
			h.Tags = append(h.Tags, fmt.Sprintf("1.%d.0", i))
		}
		return h
	}
	for _, c := range []struct {
		hint   *Hint
		stored int
		want   bool
	}{
		{nil, 100, true},
		{&Hint{}, 100, true},
		// One page of 1,000 tags against one HEAD per pushed tag.
		{tags(1), 100, false},
		{tags(2), 100, true},
		{tags(1), 10_000, false},
		// 10,002 tags are 11 pages.
		{tags(2), 10_000, false},
		{tags(11), 10_000, false},
		{tags(12), 10_000, true},
		{&Hint{Tags: []string{"a"}, More: 300}, 100_000, true},
		{tags(100), 100_000, false},
	} {
		if got := lists(cost, c.hint, c.stored); got != c.want {
			t.Errorf("%v pushed tags into %d: lists %v, want %v", c.hint, c.stored, got, c.want)
		}
	}
}

func TestMergedHintsKeepTheLatestTags(t *testing.T) {
	if h := mergeHints(false, nil, &Hint{Tags: []string{"a"}}); fmt.Sprint(h.Tags) != "[a]" {
		t.Errorf("first request: %+v", h)
	}
	if h := mergeHints(true, nil, &Hint{Tags: []string{"a"}}); h != nil {
		t.Errorf("a waiting full listing absorbs a hint: %+v", h)
	}
	if h := mergeHints(true, &Hint{Tags: []string{"a"}}, nil); h != nil {
		t.Errorf("a full listing absorbs a waiting hint: %+v", h)
	}
	h := mergeHints(true, &Hint{Tags: []string{"a", "b"}}, &Hint{Tags: []string{"b", "c"}})
	if fmt.Sprint(h.Tags) != "[a b c]" || h.More != 0 {
		t.Errorf("merged %+v, want a b c once each", h)
	}
	var all []string
	h = nil
	for i := range MaxHintTags + 10 {
		tag := fmt.Sprint(i)
		all = append(all, tag)
		h = mergeHints(h != nil, h, &Hint{Tags: []string{tag}})
	}
	if len(h.Tags) != MaxHintTags || h.More != 10 || !slices.Equal(h.Tags, all[10:]) || h.pushed() != MaxHintTags+10 {
		t.Errorf("kept %d tags from %s, %d more", len(h.Tags), h.Tags[0], h.More)
	}
}

func TestAttachedDigests(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	hint := &Hint{Tags: []string{"1.0.0", "sha256-" + b + ".sig", "sha256-" + a, "sha256-" + a + ".att",
		"sha256-" + b[:63], "main-" + a}}
	if got := attachedDigests(hint); fmt.Sprint(got) != "[sha256:"+a+" sha256:"+b+"]" {
		t.Errorf("attachedDigests() = %q", got)
	}
	if got := attachedDigests(nil); got != nil {
		t.Errorf("attachedDigests(nil) = %q", got)
	}
	many := &Hint{}
	for i := range 40 {
		many.Tags = append(many.Tags, fmt.Sprintf("sha256-%064x.sig", i))
	}
	got := attachedDigests(many)
	if len(got) != events.MaxAttached || !slices.Contains(got, fmt.Sprintf("sha256:%064x", 39)) ||
		slices.Contains(got, fmt.Sprintf("sha256:%064x", 0)) {
		t.Errorf("attachedDigests() of 40 signatures = %q; want the latest %d", got, events.MaxAttached)
	}
}
