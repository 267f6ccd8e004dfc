package policy

import (
	"cmp"
	"fmt"
	"iter"
	"strconv"
)

// numericalRule orders values as float64: ascending picks the greatest, descending the least.
// A value that does not parse fails the evaluation, as in Flux, rather than being skipped: a
// tag scheme that stopped being numeric is worth a visible error.
type numericalRule struct {
	desc bool
}

func (r numericalRule) pick(candidates iter.Seq2[string, string]) (string, bool, error) {
	var best string
	var bestNum float64
	found := false
	for tag, value := range candidates {
		num, err := strconv.ParseFloat(value, 64)
		if err != nil {
			if value != tag {
				return "", false, fmt.Errorf("tag %q: extracted value %q is not a number: %w", tag, value, err)
			}
			return "", false, fmt.Errorf("tag %q is not a number: %w", tag, err)
		}
		if found {
			// cmp.Compare gives NaN a place in the order, below every number, so the choice
			// does not depend on where a NaN sits in the list.
			c := cmp.Compare(num, bestNum)
			if r.desc {
				c = -c
			}
			if c < 0 || c == 0 && tag <= best {
				continue
			}
		}
		best, bestNum, found = tag, num, true
	}
	return best, found, nil
}

// rejected is never reported: any candidate that parses qualifies, and one that does not
// is an error.
func (numericalRule) rejected() string { return "is a number" }
