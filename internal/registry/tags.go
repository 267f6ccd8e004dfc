package registry

import (
	"fmt"
	"strconv"

	"github.com/imagereflector/reflector/internal/imagename"
)

// InvalidTags counts the tags that a registry listed, or that a push named, against the
// distribution spec's tag grammar (imagename.ValidTag). They are left out: never stored, shown
// or selected.
type InvalidTags struct {
	// Count is how many were left out.
	Count int
	// Example is the start of the first of them, at most maxExample bytes, as it came.
	Example string
	// cut tells that Example is not the whole tag.
	cut bool
}

// maxExample bounds the example kept of an invalid tag: enough to recognise it, and once
// quoted a small part of a condition message.
const maxExample = 64

// Keep returns the tags of tags that the grammar allows, counting the others into v. It
// returns tags itself when all are valid.
func (v *InvalidTags) Keep(tags []string) []string {
	for i, tag := range tags {
		if imagename.ValidTag(tag) {
			continue
		}
		out := append(make([]string, 0, len(tags)-1), tags[:i]...)
		v.add(tag)
		for _, tag := range tags[i+1:] {
			if imagename.ValidTag(tag) {
				out = append(out, tag)
			} else {
				v.add(tag)
			}
		}
		return out
	}
	return tags
}

// Merge adds the counts of o to v.
func (v *InvalidTags) Merge(o InvalidTags) {
	if v.Count == 0 {
		v.Example, v.cut = o.Example, o.cut
	}
	v.Count += o.Count
}

// add counts tag, which the grammar does not allow.
func (v *InvalidTags) add(tag string) {
	if v.Count == 0 {
		v.Example, v.cut = truncate(tag, maxExample), len(tag) > maxExample
	}
	v.Count++
}

// String says, for a condition message, how many tags were left out, with an example quoted
// (strconv.Quote: control characters, bidirectional overrides and invalid UTF-8 escaped) and
// cut; "" when none were.
func (v InvalidTags) String() string {
	if v.Count == 0 {
		return ""
	}
	what := "tags that are not valid tag names"
	if v.Count == 1 {
		what = "tag that is not a valid tag name"
	}
	example := strconv.Quote(v.Example)
	if v.cut {
		example += "…"
	}
	return fmt.Sprintf("left out %d %s (the distribution spec allows [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}), such as %s", v.Count, what, example)
}

// truncate returns the first n bytes of s at most. It may cut a character: the example is
// quoted, which shows a cut byte as an escape.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
