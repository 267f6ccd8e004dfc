// Package redact removes secret material from text that leaves reflector: the userinfo of every
// URL or address in an error, a status message, an Event, a log line or an HTTP answer. Text
// also escapes and bounds it, for the places where a registry's text may arrive.
//
// The whole userinfo is masked, the user name included, unlike (*url.URL).Redacted and
// net/http's errors, which keep it: a user name is often a token (https://TOKEN@host). The
// rules work on text that net/url cannot parse, such as a password with unescaped reserved
// characters or an address without a scheme, and do not need the text to be one URL.
package redact

import (
	"strings"
)

// Mask is what replaces a userinfo.
const Mask = "xxxxx"

// String returns s with the userinfo of every URL or address in it replaced by Mask. A word of
// s (s is split at ASCII white space) that holds "scheme://" loses everything between it and
// the word's last "@" (https://user:pass@host becomes https://xxxxx@host); a word without a
// scheme loses what precedes its last "@" when that holds a ":" (user:pass@host:port becomes
// xxxxx@host:port). An "@" that introduces a digest, as in repo@sha256:…, is none of these.
//
// A userinfo that contains white space cannot be told from the text around it; code that holds
// an address passes it through Address before putting it into a message.
func String(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		end := strings.IndexAny(s, space)
		if end < 0 {
			end = len(s)
		}
		b.WriteString(word(s[:end]))
		rest := s[end:]
		gap := len(rest) - len(strings.TrimLeft(rest, space))
		b.WriteString(rest[:gap])
		s = rest[gap:]
	}
	return b.String()
}

// Address returns address, one URL or host address such as a proxy's or a sink's, with its
// userinfo replaced by Mask. Unlike String it treats all of address as one, so a password with
// white space in it is masked whole.
func Address(address string) string {
	return word(address)
}

// Error returns err with a message that String has redacted; errors.Is and errors.As still
// reach err and what it wraps. It returns err itself when its message has nothing to redact.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := String(msg); red != msg {
		return &redacted{msg: red, err: err}
	}
	return err
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// space is the ASCII white space that separates words. Other white space stays inside a word,
// so that a password holding it is masked with the rest.
const space = " \t\n\v\f\r"

// opening is the punctuation that may precede an address in a message, as in "user:pass@host"
// or (user:pass@host); it stays in place when a userinfo without a scheme is masked.
const opening = "\"'`([{<"

// word redacts one word of a text.
func word(w string) string {
	at := userinfoEnd(w)
	if at < 0 {
		return w
	}
	lead := len(w) - len(strings.TrimLeft(w, opening))
	if k := strings.Index(w, "://"); k >= lead && k < at && isScheme(w[lead:k]) {
		if k+3 == at {
			return w // an empty userinfo, as in http://@host
		}
		return w[:k+3] + Mask + w[at:]
	}
	if !strings.Contains(w[lead:at], ":") {
		// Without a scheme and without a password, user@host cannot be told from an e-mail
		// address.
		return w
	}
	return w[:lead] + Mask + w[at:]
}

// userinfoEnd returns the index of the "@" that ends w's userinfo: the last "@" that does not
// introduce a digest, since a password may itself contain "@". It is -1 when there is none.
func userinfoEnd(w string) int {
	for end := len(w); end > 0; {
		at := strings.LastIndexByte(w[:end], '@')
		if at < 0 {
			return -1
		}
		if !isDigest(w[at+1:]) {
			return at
		}
		end = at
	}
	return -1
}

// isScheme reports whether s is a URL scheme (RFC 3986: a letter, then letters, digits, "+",
// "-" and ".").
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// minDigestHex is the fewest hex digits taken for a digest's encoded part: no port is that long,
// and every registered algorithm (sha256, sha512) has more.
const minDigestHex = 32

// isDigest reports whether s starts with a digest, algorithm:hex, as in image references. The
// algorithm starts with a letter, as every registered one does, so that host:port is never
// taken for one.
func isDigest(s string) bool {
	alg, rest, ok := strings.Cut(s, ":")
	if !ok || alg == "" || alg[0] < 'a' || alg[0] > 'z' {
		return false
	}
	for i := 0; i < len(alg); i++ {
		c := alg[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	n := 0
	for n < len(rest) && isHex(rest[n]) {
		n++
	}
	return n >= minDigestHex
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
