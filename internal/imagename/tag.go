package imagename

// MaxTagLength is the longest tag the distribution spec allows.
const MaxTagLength = 128

// ValidTag reports whether tag matches the distribution spec's tag grammar,
// [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}. A registry's listing and a push payload are input: a tag
// outside the grammar (control characters, other scripts, invalid UTF-8, kilobytes of text) is
// never stored, shown or selected, since what reflector selects ends up in Git. It compares bytes,
// so any byte that is not ASCII fails, and it costs no allocation.
func ValidTag(tag string) bool {
	if len(tag) == 0 || len(tag) > MaxTagLength || tagByte[tag[0]] != tagFirst {
		return false
	}
	for i := 1; i < len(tag); i++ {
		if tagByte[tag[i]] == 0 {
			return false
		}
	}
	return true
}

// The classes of tagByte: a byte that may begin a tag, and one that may only follow.
const (
	tagFirst = 1 + iota
	tagLater
)

// tagByte classes every byte for ValidTag; a look-up instead of comparisons, since a stored
// list of 100k tags is checked whole at every read.
var tagByte = func() (t [256]uint8) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
			t[c] = tagFirst
		case c == '.' || c == '-':
			t[c] = tagLater
		}
	}
	return t
}()
