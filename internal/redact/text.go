package redact

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxText is the most bytes that one message leaving reflector carries: a condition message,
// an Event's message, a log attribute. Registries answer with error bodies of up to 64 KiB
// (all that go-containerregistry reads of one), and the API server refuses a status whose
// condition message is over 32,768 characters; a kibibyte holds every message a registry
// writes for people and the beginning of any error page.
const MaxText = 1024

// Text returns s fit to leave reflector: its userinfo masked (String), every character that is
// not printable escaped as in a Go string literal (a control character as \x1b, a bidirectional
// override as \u202e, a byte of invalid UTF-8 as \xff, a line break as \n), and at most MaxText
// bytes: a longer text keeps its start and its end around a note of how many bytes were left
// out. Masking runs first, so that no cut can hide a userinfo from it.
func Text(s string) string {
	return bound(escape(String(s)), MaxText)
}

// escape replaces the characters of s that are not printable with their escapes.
func escape(s string) string {
	i := 0
	for i < len(s) && ' ' <= s[i] && s[i] < utf8.RuneSelf && s[i] != 0x7f {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for rest := s[i:]; len(rest) > 0; {
		r, size := utf8.DecodeRuneInString(rest)
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(rest[0])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(rest[0])&0xf, 16))
		case r == ' ' || strconv.IsPrint(r):
			b.WriteString(rest[:size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		rest = rest[size:]
	}
	return b.String()
}

// bound returns s when it has at most max bytes, else its start and its end, cut at character
// boundaries, around a note of what was left out, in max bytes at most.
func bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	// The note's number is at most len(s), so its length is known before the cut.
	note := " … [" + strconv.Itoa(len(s)) + " bytes left out] … "
	budget := max - len(note)
	head := budget * 3 / 4
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - (budget - head)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + " … [" + strconv.Itoa(tail-head) + " bytes left out] … " + s[tail:]
}
