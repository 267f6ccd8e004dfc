package imagename

// MaxTagLength is the longest tag the distribution spec allows.
const MaxTagLength = 128

// ValidTag reports whether tag matches the distribution spec's tag grammar,
// [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}. A registry's listing and a push payload are input: a tag
// outside the grammar (control characters, other scripts, invalid UTF-8, kilobytes of text) is
// never stored, shown or selected, since what reflector selects ends up in Git. It compares bytes,
// so any byte that is not ASCII fails, and it costs no allocation.
func ValidTag(tag string) bool {
	if len(tag) == 0 || len(tag) > MaxTagLength {
		return false
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case i > 0 && (c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
