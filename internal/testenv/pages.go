package testenv

import (
	"fmt"
	"io"
	"strings"
)

// Page returns the first size bytes of a registry answer that starts with prefix and goes on with
// what elements yields: a body as large as a test wants, made as it is read.
func Page(prefix string, elements io.Reader, size int64) io.Reader {
	return io.LimitReader(io.MultiReader(strings.NewReader(prefix), elements), size)
}

// Repeating yields s over and over.
func Repeating(s string) io.Reader { return &repeating{s: s} }

type repeating struct {
	s   string
	off int
}

func (r *repeating) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		r.off = (r.off + c) % len(r.s)
		n += c
	}
	return n, nil
}

// Elements yields the JSON strings format makes of 0, 1, 2, ..., each followed by a comma: the
// elements of an array that never ends.
func Elements(format string) io.Reader { return &elements{format: `"` + format + `",`} }

type elements struct {
	format string
	n      int
	buf    []byte
}

func (e *elements) Read(p []byte) (int, error) {
	for len(e.buf) < len(p) {
		e.buf = fmt.Appendf(e.buf, e.format, e.n)
		e.n++
	}
	n := copy(p, e.buf)
	e.buf = e.buf[n:]
	return n, nil
}
