package policy

import (
	"fmt"
	"iter"
	"regexp"
	"strings"
	"unicode"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// tagFilter applies filterTags: it drops the tags its pattern does not match and, with an
// extract template, replaces each remaining tag's value by the template's expansion.
type tagFilter struct {
	re      *regexp.Regexp
	extract string
	// groups is set when extract is exactly one group reference ("$1", "${name}"): the value
	// is then a substring of the tag, taken from the first of these groups that matched,
	// without building a new string per tag.
	groups []int
	// constant is set when extract references no group, so every value is extract itself.
	constant bool
}

func newTagFilter(spec v1.TagFilter) (*tagFilter, error) {
	re, err := regexp.Compile(spec.Pattern)
	if err != nil {
		return nil, fmt.Errorf("filterTags pattern %q: %w", spec.Pattern, err)
	}
	f := &tagFilter{re: re, extract: spec.Extract}
	if spec.Extract != "" {
		f.constant = !strings.Contains(spec.Extract, "$")
		f.groups = singleGroup(re, spec.Extract)
	}
	return f, nil
}

// candidates yields each tag that passes the filter with the value the policy compares, and
// counts them in matched; referrer tags (IsReferrerTag) are dropped first and counted in
// referrers. A nil filter passes every other tag unchanged.
func (f *tagFilter) candidates(tags []string, matched, referrers *int) iter.Seq2[string, string] {
	return func(yield func(tag, value string) bool) {
		var buf []byte
		for _, tag := range tags {
			if IsReferrerTag(tag) {
				*referrers++
				continue
			}
			value := tag
			switch {
			case f == nil:
			case f.extract == "":
				if !f.re.MatchString(tag) {
					continue
				}
			default:
				m := f.re.FindStringSubmatchIndex(tag)
				if m == nil {
					continue
				}
				switch {
				case f.constant:
					value = f.extract
				case f.groups != nil:
					value = ""
					for _, g := range f.groups {
						if 2*g+1 < len(m) && m[2*g] >= 0 {
							value = tag[m[2*g]:m[2*g+1]]
							break
						}
					}
				default:
					buf = f.re.ExpandString(buf[:0], f.extract, tag, m)
					value = string(buf)
				}
			}
			*matched++
			if !yield(tag, value) {
				return
			}
		}
	}
}

// singleGroup returns the groups whose text regexp.Expand would substitute for a template
// that is one reference and nothing else, in the order Expand tries them, or nil when the
// template is anything more. It follows Expand's reading of a reference: a name of letters,
// digits and underscores, optionally in braces, that denotes a group number when it is a
// decimal below 1e8 without leading zeros, and otherwise every group with that name.
func singleGroup(re *regexp.Regexp, template string) []int {
	name, ok := strings.CutPrefix(template, "$")
	if !ok {
		return nil
	}
	name, braced := strings.CutPrefix(name, "{")
	if braced {
		if name, ok = strings.CutSuffix(name, "}"); !ok {
			return nil
		}
	}
	if name == "" {
		return nil
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' {
			return nil
		}
	}
	if num, ok := groupNumber(name); ok {
		return []int{num}
	}
	groups := []int{}
	for i, n := range re.SubexpNames() {
		if i > 0 && n == name {
			groups = append(groups, i)
		}
	}
	return groups
}

// groupNumber parses a reference name as Expand does: decimal digits below 1e8 with no
// leading zero.
func groupNumber(name string) (int, bool) {
	if len(name) > 1 && name[0] == '0' {
		return 0, false
	}
	num := 0
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' || num >= 1e8 {
			return 0, false
		}
		num = num*10 + int(name[i]-'0')
	}
	return num, true
}
