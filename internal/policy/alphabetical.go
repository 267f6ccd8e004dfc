package policy

import (
	"iter"
	"strings"
)

// alphabeticalRule orders values byte-wise: ascending picks the greatest, descending the
// least.
type alphabeticalRule struct {
	desc bool
}

func (r alphabeticalRule) pick(candidates iter.Seq2[string, string]) (string, bool, error) {
	var best, bestValue string
	found := false
	for tag, value := range candidates {
		if found {
			c := strings.Compare(value, bestValue)
			if r.desc {
				c = -c
			}
			if c < 0 || c == 0 && tag <= best {
				continue
			}
		}
		best, bestValue, found = tag, value, true
	}
	return best, found, nil
}

// rejected is never reported: any candidate qualifies.
func (alphabeticalRule) rejected() string { return "qualifies" }
