package registry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/imagereflector/reflector/internal/imagename"
)

// A tags/list page is read as a stream, token by token, so that what one page costs does not
// grow with what the registry sends:
//
//   - maxPageBytes bounds the bytes read of one page. A page of the default 1,000 tags is at
//     most 131 kB (tags of 128 characters, quoted, with commas); a registry that ignores n and
//     sends the whole of a repository at the tag limit (DefaultMaxTags) in one page needs 26 MB
//     for tags of that length, 6 MB for tags of 30. 32 MiB holds both with room, and takes a
//     second or two to read on a fast link; the deadline bounds a slow one.
//   - maxTokenBytes bounds one JSON token (a string, a number, a run of white space), and so
//     the parser's buffer, which holds a token whole: a tag is at most 128 characters, 768
//     bytes when every one is written as a \u escape; a repository name at most 255.
//   - maxDepth bounds the nesting of members other than tags, which the parser follows by
//     recursion: GCR's manifest map nests three deep.
//   - a page lists at most twice the Client's tag limit of entries, counted before the grammar
//     and the exclusion list drop any, so that the time spent on one page is bounded too.
//
// The tags kept across pages are bounded by the tag limit and the grammar's 128 bytes each.
const (
	maxPageBytes  = 32 << 20
	maxTokenBytes = 64 << 10
	maxDepth      = 32
)

// errPageTooLarge and errTokenTooLarge end the reading of a page past its bounds;
// errPageEntries is wrapped by the error of a page that lists too many entries, and
// errNotTagList by that of a JSON answer of another shape.
var (
	errPageEntries   = errors.New("too many entries in one page")
	errNotTagList    = errors.New("not a tag list")
	errPageTooLarge  = fmt.Errorf("the tag list page is larger than %d MiB, more than a registry needs for any repository", maxPageBytes>>20)
	errTokenTooLarge = fmt.Errorf("the tag list page holds a JSON value of more than %d KiB, more than any tag or name", maxTokenBytes>>10)
)

// decodePage reads one tags/list answer, {"name": ..., "tags": [...]} and any other members,
// from r and calls each for every string of its tags array that the tag grammar allows, in
// order; others are counted into invalid. A page that is not such an object, that lists more
// than maxEntries entries or that passes maxPageBytes, maxTokenBytes or maxDepth is an error;
// so is any error of each, which ends the reading.
//
// It is a small JSON reader of its own: json.Decoder allocates an error value per element it
// decodes from a stream (it needs the next byte to end a value), five times the allocations of
// the tags themselves; this one allocates only the tags it keeps.
func decodePage(r io.Reader, maxEntries int, invalid *InvalidTags, each func(tag string) error) error {
	p := parsers.Get().(*pageParser)
	defer parsers.Put(p)
	p.r.Reset(&pageReader{r: r, left: maxPageBytes})
	err := p.page(maxEntries, invalid, each)
	p.r.Reset(nil)
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parsers keeps page parsers, whose buffer holds the longest token (64 KiB) between the pages
// and scans of a process.
var parsers = sync.Pool{New: func() any {
	return &pageParser{r: bufio.NewReaderSize(nil, maxTokenBytes+16)}
}}

// errSyntax is wrapped by the error of a page that is not JSON.
var errSyntax = errors.New("invalid JSON")

// pageParser reads the JSON of one page.
type pageParser struct {
	r *bufio.Reader
	// scratch holds a string with escapes while it is read.
	scratch []byte
}

func (p *pageParser) page(maxEntries int, invalid *InvalidTags, each func(tag string) error) error {
	c, err := p.next()
	if err != nil {
		return err
	}
	if c != '{' {
		if strings.IndexByte(`["-0123456789tfn`, c) >= 0 {
			return fmt.Errorf("%w: it is %s, not an object", errNotTagList, describeByte(c))
		}
		return p.unexpected(c, "an object")
	}
	entries := 0
	for first := true; ; first = false {
		c, err := p.next()
		if err != nil {
			return err
		}
		if c == '}' && first {
			break
		}
		if c != '"' {
			return p.unexpected(c, "a member name")
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		// key is only valid until the next read. Member names match case-insensitively, as
		// encoding/json (and so go-containerregistry) matches them.
		isTags := bytes.EqualFold(key, []byte("tags"))
		if err := p.expect(':'); err != nil {
			return err
		}
		if isTags {
			if err := p.tags(&entries, maxEntries, invalid, each); err != nil {
				return err
			}
		} else if err := p.skip(1); err != nil {
			return err
		}
		if c, err = p.next(); err != nil {
			return err
		}
		if c == '}' {
			break
		}
		if c != ',' {
			return p.unexpected(c, "a comma or the end of the object")
		}
	}
	if c, err := p.next(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: more data follows the object (%s)", errNotTagList, describeByte(c))
		}
		return err
	}
	return nil
}

// tags reads the value of the tags member: null or an array of strings.
func (p *pageParser) tags(entries *int, maxEntries int, invalid *InvalidTags, each func(tag string) error) error {
	c, err := p.next()
	if err != nil {
		return err
	}
	switch c {
	case 'n':
		// "tags": null, as some registries answer for a repository without tags.
		return p.literal(c)
	case '[':
	default:
		return fmt.Errorf("%w: the tags member is %s, not an array", errNotTagList, describeByte(c))
	}
	for first := true; ; first = false {
		c, err := p.next()
		if err != nil {
			return err
		}
		if c == ']' && first {
			return nil
		}
		if c != '"' {
			return fmt.Errorf("%w: the tags array holds %s, not a string", errNotTagList, describeByte(c))
		}
		if *entries++; *entries > maxEntries {
			return fmt.Errorf("%w: the page lists more than %d tags (%w)", ErrTagLimit, maxEntries, errPageEntries)
		}
		raw, err := p.str()
		if err != nil {
			return err
		}
		// Converting in the comparison costs no allocation.
		switch {
		case imagename.ValidTag(string(raw)):
			if err := each(string(raw)); err != nil {
				return err
			}
		case invalid.Count == 0:
			invalid.add(string(raw))
		default:
			invalid.Count++ // only the first is kept, as an example
		}
		if c, err = p.next(); err != nil {
			return err
		}
		if c == ']' {
			return nil
		}
		if c != ',' {
			return p.unexpected(c, "a comma or the end of the array")
		}
	}
}

// skip reads past the value that comes next, at nesting depth, checking its syntax.
func (p *pageParser) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: it nests deeper than %d levels", errNotTagList, maxDepth)
	}
	c, err := p.next()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		_, err := p.str()
		return err
	case '[', '{':
		end := byte(']')
		if c == '{' {
			end = '}'
		}
		for first := true; ; first = false {
			b, err := p.next()
			if err != nil {
				return err
			}
			if b == end && first {
				return nil
			}
			if c == '{' {
				if b != '"' {
					return p.unexpected(b, "a member name")
				}
				if _, err := p.str(); err != nil {
					return err
				}
				if err := p.expect(':'); err != nil {
					return err
				}
			} else if err := p.r.UnreadByte(); err != nil {
				return err
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			if b, err = p.next(); err != nil {
				return err
			}
			if b == end {
				return nil
			}
			if b != ',' {
				return p.unexpected(b, "a comma")
			}
		}
	}
	return p.literal(c)
}

// literal reads the rest of a number, true, false or null that starts with c.
func (p *pageParser) literal(c byte) error {
	p.scratch = append(p.scratch[:0], c)
	for {
		b, err := p.r.ReadByte()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if isSpace(b) || b == ',' || b == ']' || b == '}' {
			if err := p.r.UnreadByte(); err != nil {
				return err
			}
			break
		}
		p.scratch = append(p.scratch, b)
	}
	if !json.Valid(p.scratch) {
		return fmt.Errorf("%w: %s is not a JSON value", errSyntax, describeByte(c))
	}
	return nil
}

// str reads a string whose opening quote was read, and returns its value, valid until the next
// read. A string without escapes is returned from the reader's buffer as it is; one with
// escapes is decoded by encoding/json.
func (p *pageParser) str() ([]byte, error) {
	s, err := p.r.ReadSlice('"')
	if err == bufio.ErrBufferFull {
		return nil, errTokenTooLarge
	}
	if err != nil {
		return nil, err
	}
	s = s[:len(s)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		for _, c := range s {
			if c < 0x20 {
				return nil, fmt.Errorf("%w: a control character in a string", errSyntax)
			}
		}
		return s, nil
	}
	// An escape: read on to the quote that no backslash escapes, then let encoding/json
	// check and decode the escapes.
	p.scratch = append(append(p.scratch[:0], '"'), s...)
	for escaped(p.scratch) {
		p.scratch = append(p.scratch, '"')
		more, err := p.r.ReadSlice('"')
		if err == bufio.ErrBufferFull || len(p.scratch)+len(more) > maxTokenBytes {
			return nil, errTokenTooLarge
		}
		if err != nil {
			return nil, err
		}
		p.scratch = append(p.scratch, more[:len(more)-1]...)
	}
	p.scratch = append(p.scratch, '"')
	var out string
	if err := json.Unmarshal(p.scratch, &out); err != nil {
		return nil, fmt.Errorf("%w: %w", errSyntax, err)
	}
	return []byte(out), nil
}

// escaped tells whether s ends in an odd number of backslashes, so that a quote after it is
// part of the string.
func escaped(s []byte) bool {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// next returns the next byte that is not white space.
func (p *pageParser) next() (byte, error) {
	for {
		c, err := p.r.ReadByte()
		if err != nil || !isSpace(c) {
			return c, err
		}
	}
}

// expect reads the next byte that is not white space, which must be want.
func (p *pageParser) expect(want byte) error {
	c, err := p.next()
	if err != nil {
		return err
	}
	if c != want {
		return p.unexpected(c, strconv.QuoteRune(rune(want)))
	}
	return nil
}

// unexpected is the error of finding c where want should be.
func (p *pageParser) unexpected(c byte, want string) error {
	return fmt.Errorf("%w: %s where %s should be", errSyntax, describeByte(c), want)
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// describeByte names what a value starting with c is, for an error message, without repeating
// the registry's text.
func describeByte(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == '-' || '0' <= c && c <= '9':
		return "a number"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case ' ' < c && c < 0x7f:
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// pageReader passes a page's bytes on to the parser until left runs out, and follows them
// enough to tell where a JSON token starts and ends: inside a string, and between two
// structural characters outside one. A token longer than maxTokenBytes ends the reading.
type pageReader struct {
	r        io.Reader
	left     int64
	inString bool
	escaped  bool
	run      int
}

func (p *pageReader) Read(b []byte) (int, error) {
	if p.left <= 0 {
		// One byte past the bound tells a page of exactly maxPageBytes from a longer one.
		var one [1]byte
		if n, _ := io.ReadFull(p.r, one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, errPageTooLarge
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n, err := p.r.Read(b)
	p.left -= int64(n)
	for _, c := range b[:n] {
		switch {
		case p.escaped:
			p.escaped = false
			p.run++
		case p.inString && c == '\\':
			p.escaped = true
			p.run++
		case c == '"':
			p.inString = !p.inString
			p.run = 0
		case !p.inString && (c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':'):
			p.run = 0
		default:
			p.run++
		}
		if p.run > maxTokenBytes {
			return 0, errTokenTooLarge
		}
	}
	return n, err
}
