package policy

import (
	"errors"
	"fmt"
	"iter"
	"strings"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// ErrInvalidPolicy is wrapped by every error NewSelector returns: the spec itself is wrong,
// and evaluating it again will not help until it is edited.
var ErrInvalidPolicy = errors.New("invalid policy")

// ErrNoCandidates is wrapped by the error Latest returns when no tag is left to choose from:
// the list is empty, filterTags dropped every tag, or no version satisfies the semver range.
var ErrNoCandidates = errors.New("no candidate tags")

// Selector picks the latest tag of a list by one ImagePolicy's policy and filterTags. It is
// immutable, so one Selector may serve concurrent calls.
type Selector struct {
	filter *tagFilter
	picker picker
}

// picker chooses among candidates, each an original tag and the value the policy compares
// (the extracted value, or the tag again). ok is false when none qualifies.
type picker interface {
	pick(candidates iter.Seq2[string, string]) (tag string, ok bool, err error)
	// rejected describes why no candidate qualified; it completes "none of N tags ...".
	rejected() string
}

// NewSelector validates the policy, filterTags and verify of spec and returns the Selector that
// applies the first two. Its errors wrap ErrInvalidPolicy.
func NewSelector(spec v1.ImagePolicySpec) (*Selector, error) {
	p, err := newPicker(spec.Policy)
	if err != nil {
		return nil, invalidPolicy(err)
	}
	if err := checkVerify(spec.Verify); err != nil {
		return nil, invalidPolicy(err)
	}
	s := &Selector{picker: p}
	if f := spec.FilterTags; f != nil && (f.Pattern != "" || f.Extract != "") {
		if s.filter, err = newTagFilter(*f); err != nil {
			return nil, invalidPolicy(err)
		}
	}
	return s, nil
}

// Latest returns the latest of tags. An error wrapping ErrNoCandidates means none qualified;
// any other error means the policy could not be applied to these tags.
func (s *Selector) Latest(tags []string) (string, error) {
	if len(tags) == 0 {
		return "", fmt.Errorf("%w: the repository has no tags", ErrNoCandidates)
	}
	matched, referrers := 0, 0
	tag, ok, err := s.picker.pick(s.filter.candidates(tags, &matched, &referrers))
	images := len(tags) - referrers
	switch {
	case err != nil:
		return "", err
	case ok:
		return tag, nil
	case images == 0:
		return "", fmt.Errorf("%w: each of the %d tags names a signature, attestation or referrer (sha256-<digest>), never an image to deploy", ErrNoCandidates, len(tags))
	case matched == 0:
		return "", fmt.Errorf("%w: none of the %d tags matches filterTags pattern %q", ErrNoCandidates, images, s.filter.re.String())
	case matched < images:
		return "", fmt.Errorf("%w: none of the %d tags that match filterTags %s", ErrNoCandidates, matched, s.picker.rejected())
	default:
		return "", fmt.Errorf("%w: none of the %d tags %s", ErrNoCandidates, images, s.picker.rejected())
	}
}

// Ranked returns up to n of tags that Latest may choose from, best first: the first is Latest's
// answer, the second the answer once the first is gone, and so on. Its errors are Latest's, for
// the first.
func (s *Selector) Ranked(tags []string, n int) ([]string, error) {
	var out []string
	rest := tags
	for len(out) < n {
		tag, err := s.Latest(rest)
		if err != nil {
			if len(out) > 0 && errors.Is(err, ErrNoCandidates) {
				break
			}
			return nil, err
		}
		out = append(out, tag)
		next := make([]string, 0, len(rest)-1)
		for _, t := range rest {
			if t != tag {
				next = append(next, t)
			}
		}
		rest = next
	}
	return out, nil
}

func newPicker(choice v1.ImagePolicyChoice) (picker, error) {
	var kinds []string
	if choice.SemVer != nil {
		kinds = append(kinds, "semver")
	}
	if choice.Alphabetical != nil {
		kinds = append(kinds, "alphabetical")
	}
	if choice.Numerical != nil {
		kinds = append(kinds, "numerical")
	}
	switch {
	case len(kinds) == 0:
		return nil, errors.New("no policy set: one of semver, alphabetical or numerical is required")
	case len(kinds) > 1:
		return nil, fmt.Errorf("more than one policy set (%s): exactly one is allowed", strings.Join(kinds, ", "))
	case choice.SemVer != nil:
		return newSemverRule(choice.SemVer.Range)
	case choice.Alphabetical != nil:
		desc, err := parseOrder("alphabetical", choice.Alphabetical.Order)
		return alphabeticalRule{desc: desc}, err
	default:
		desc, err := parseOrder("numerical", choice.Numerical.Order)
		return numericalRule{desc: desc}, err
	}
}

// parseOrder reports whether order is descending. Flux compares orders case-insensitively
// and treats an empty one as ascending.
func parseOrder(kind, order string) (desc bool, err error) {
	switch {
	case order == "", strings.EqualFold(order, v1.OrderAsc):
		return false, nil
	case strings.EqualFold(order, v1.OrderDesc):
		return true, nil
	default:
		return false, fmt.Errorf("%s order %q: must be one of %s, %s", kind, order, v1.OrderAsc, v1.OrderDesc)
	}
}

func invalidPolicy(err error) error {
	return fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
}
