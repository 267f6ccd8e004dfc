package policy

import (
	"cmp"
	"fmt"
	"iter"
	"math"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// semverRule picks the highest version that satisfies a Masterminds semver range.
//
// Masterminds allocates while it parses a version and builds an error for every version a
// range rejects; over 100k tags that is tens of megabytes per evaluation. So tags are parsed
// here without allocating, and a version is checked against the range only when it would
// beat the best one so far and no check already answered for it (see probeKey).
type semverRule struct {
	rng         string
	constraints *semver.Constraints
	// allowsPre is false when no prerelease can satisfy the range: Masterminds admits a
	// prerelease only when the range names one, and a prerelease is written with a '-'.
	allowsPre bool
	// bound is at least every number written in the range; boundOK is false when one of them
	// leaves no room above it in a uint64.
	bound   uint64
	boundOK bool
}

func newSemverRule(rng string) (*semverRule, error) {
	c, err := semver.NewConstraint(rng)
	if err != nil {
		return nil, fmt.Errorf("semver range %q: %w", rng, err)
	}
	bound, ok := largestNumber(rng)
	return &semverRule{
		rng:         rng,
		constraints: c,
		allowsPre:   strings.Contains(rng, "-"),
		bound:       bound,
		boundOK:     ok && bound < math.MaxUint64,
	}, nil
}

func (r *semverRule) pick(candidates iter.Seq2[string, string]) (string, bool, error) {
	var (
		best    version
		bestTag string
		found   bool
	)
	probed := map[probeKey]bool{}
	for tag, value := range candidates {
		v, ok := parseVersion(value)
		if !ok || v.pre != "" && !r.allowsPre {
			continue
		}
		if found {
			if c := v.compare(best); c < 0 || c == 0 && tag <= bestTag {
				continue
			}
		}
		if !r.satisfies(v, probed) {
			continue
		}
		best, bestTag, found = v, tag, true
	}
	return bestTag, found, nil
}

func (r *semverRule) rejected() string {
	return fmt.Sprintf("is a version in range %q", r.rng)
}

// satisfies reports whether the range admits v, remembering in probed the answers that
// stand for a whole group of versions.
func (r *semverRule) satisfies(v version, probed map[probeKey]bool) bool {
	key, shared := r.probeKey(v)
	if !shared {
		return r.check(v.text)
	}
	ok, seen := probed[key]
	if !seen {
		ok = r.check(key.text())
		probed[key] = ok
	}
	return ok
}

func (r *semverRule) check(text string) bool {
	v, err := semver.StrictNewVersion(text)
	return err == nil && r.constraints.Check(v)
}

// probeKey names a group of versions that the range admits or rejects together.
//
// A Masterminds constraint sees a version only through how its major, minor and patch
// compare with the constraint's version (equal, or which is greater, in that order of
// precedence), whether it is a prerelease, and, where major, minor and patch are equal or in
// a "!=" with a wildcard patch, how its prerelease compares. Every number in a constraint's
// version is written in the range, so it is at most bound. Hence every version whose major
// exceeds bound fares alike with every constraint, prereleases and releases apart; so does
// every version of one major whose minor exceeds bound; and every version of one major and
// minor whose patch exceeds bound, with one prerelease. One check of a representative
// answers for each group. TestMatchesReference and FuzzSelector hold this against
// Masterminds itself.
type probeKey struct {
	major, minor, patch uint64
	pre                 string
}

func (r *semverRule) probeKey(v version) (probeKey, bool) {
	// Above major or minor, only whether there is a prerelease counts; "0" stands for any.
	anyPre := ""
	if v.pre != "" {
		anyPre = "0"
	}
	switch {
	case !r.boundOK:
		return probeKey{}, false
	case v.major > r.bound:
		return probeKey{major: r.bound + 1, pre: anyPre}, true
	case v.minor > r.bound:
		return probeKey{major: v.major, minor: r.bound + 1, pre: anyPre}, true
	case v.patch > r.bound:
		return probeKey{major: v.major, minor: v.minor, patch: r.bound + 1, pre: v.pre}, true
	default:
		return probeKey{}, false
	}
}

// text is the representative version of the group.
func (k probeKey) text() string {
	s := strconv.FormatUint(k.major, 10) + "." + strconv.FormatUint(k.minor, 10) + "." + strconv.FormatUint(k.patch, 10)
	if k.pre != "" {
		s += "-" + k.pre
	}
	return s
}

// largestNumber returns the largest run of decimal digits in s (0 when there is none), and
// false when a run does not fit in a uint64.
func largestNumber(s string) (uint64, bool) {
	var largest uint64
	for s != "" {
		i := strings.IndexFunc(s, isDigit)
		if i < 0 {
			break
		}
		s = s[i:]
		end := strings.IndexFunc(s, func(r rune) bool { return !isDigit(r) })
		if end < 0 {
			end = len(s)
		}
		n, ok := parseDigits(s[:end])
		if !ok {
			return 0, false
		}
		largest = max(largest, n)
		s = s[end:]
	}
	return largest, true
}

func isDigit(r rune) bool { return '0' <= r && r <= '9' }

// version is a tag parsed as Flux parses it; text is the tag without its "v", for
// Masterminds to parse again when the version is checked against the range.
type version struct {
	major, minor, patch uint64
	pre                 string
	text                string
}

// parseVersion accepts exactly the tags Flux accepts: one leading "v" removed, what remains
// must pass semver.StrictNewVersion; and since Flux then parses the whole tag with
// semver.NewVersion, the tag may not be longer than semver.MaxVersionLen. It reads the tag
// once, left to right, so that most other tags are turned down at their first bytes.
func parseVersion(tag string) (version, bool) {
	if len(tag) > semver.MaxVersionLen {
		return version{}, false
	}
	s := strings.TrimPrefix(tag, "v")
	v := version{text: s}
	var i int
	var ok bool
	if v.major, i, ok = scanSegment(s, 0); !ok || i == len(s) || s[i] != '.' {
		return version{}, false
	}
	if v.minor, i, ok = scanSegment(s, i+1); !ok || i == len(s) || s[i] != '.' {
		return version{}, false
	}
	if v.patch, i, ok = scanSegment(s, i+1); !ok {
		return version{}, false
	}
	rest := s[i:]
	if pre, ok := strings.CutPrefix(rest, "-"); ok {
		end := strings.IndexByte(pre, '+')
		if end < 0 {
			end = len(pre)
		}
		if v.pre, rest = pre[:end], pre[end:]; !validIdentifiers(v.pre, true) {
			return version{}, false
		}
	}
	if rest == "" {
		return v, true
	}
	build, ok := strings.CutPrefix(rest, "+")
	return v, ok && validIdentifiers(build, false)
}

// scanSegment reads the major, minor or patch number that starts at s[i]: digits without a
// leading zero. It returns the number and the index after it.
func scanSegment(s string, i int) (uint64, int, bool) {
	start := i
	var n uint64
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, i, false
		}
		n = n*10 + d
	}
	if i == start || i-start > 1 && s[start] == '0' {
		return 0, i, false
	}
	return n, i, true
}

// validIdentifiers reports whether s is dot-separated, non-empty identifiers of ASCII
// letters, digits and hyphens; in a prerelease a numeric identifier has no leading zero.
func validIdentifiers(s string, prerelease bool) bool {
	for {
		id, rest, more := strings.Cut(s, ".")
		if id == "" {
			return false
		}
		numeric := true
		for i := 0; i < len(id); i++ {
			switch c := id[i]; {
			case '0' <= c && c <= '9':
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '-':
				numeric = false
			default:
				return false
			}
		}
		if prerelease && numeric && len(id) > 1 && id[0] == '0' {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

// parseDigits is strconv.ParseUint(s, 10, 64) without the error, which would allocate.
func parseDigits(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// compare orders versions as semver.Version.Compare does: build metadata is ignored and a
// prerelease is below its release.
func (v version) compare(o version) int {
	if c := cmp.Compare(v.major, o.major); c != 0 {
		return c
	}
	if c := cmp.Compare(v.minor, o.minor); c != 0 {
		return c
	}
	if c := cmp.Compare(v.patch, o.patch); c != 0 {
		return c
	}
	switch {
	case v.pre == o.pre:
		return 0
	case v.pre == "":
		return 1
	case o.pre == "":
		return -1
	}
	return comparePrerelease(v.pre, o.pre)
}

// comparePrerelease compares prereleases identifier by identifier, as Masterminds does:
// numerically when both are numbers, byte-wise when neither is, a number below a word, and
// a prerelease that runs out first below the other.
func comparePrerelease(a, b string) int {
	for a != "" || b != "" {
		x, restA, _ := strings.Cut(a, ".")
		y, restB, _ := strings.Cut(b, ".")
		if c := compareIdentifier(x, y); c != 0 {
			return c
		}
		a, b = restA, restB
	}
	return 0
}

func compareIdentifier(x, y string) int {
	switch {
	case x == y:
		return 0
	case x == "":
		return -1
	case y == "":
		return 1
	}
	// Masterminds takes as a number whatever strconv.ParseUint accepts, so digits that
	// overflow a uint64 compare as a word.
	nx, xNum := parseDigits(x)
	ny, yNum := parseDigits(y)
	switch {
	case !xNum && !yNum:
		return strings.Compare(x, y)
	case !yNum:
		return -1
	case !xNum:
		return 1
	default:
		return cmp.Compare(nx, ny)
	}
}
