package reconcile

import (
	"fmt"

	"github.com/imagereflector/reflector/internal/registry"
)

// validHint returns hint without the tags that the tag grammar does not allow, counting them
// into invalid: a push payload is input, and such a tag is never confirmed, stored or shown.
// The webhook parsers refuse such tags already; a Hint may come from any caller.
func validHint(hint *Hint, invalid *registry.InvalidTags) *Hint {
	if hint == nil {
		return nil
	}
	tags := invalid.Keep(hint.Tags)
	if len(tags) == len(hint.Tags) {
		return hint
	}
	return &Hint{Tags: tags, More: hint.More}
}

// scanMessage is the Ready message of a successful scan that stored count tags and left out
// the invalid ones.
func scanMessage(count int, invalid registry.InvalidTags) string {
	message := fmt.Sprintf("successful scan: found %d tags", count)
	if invalid.Count > 0 {
		message += "; " + invalid.String()
	}
	return message
}
