package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

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
//     json.Decoder's buffer, which holds a token whole: a tag is at most 128 characters, 768
//     bytes when every one is written as \u escape; a repository name at most 255.
//   - maxDepth bounds the nesting of members other than tags, which json.Decoder remembers
//     one word per level: GCR's manifest map nests three deep.
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
// than maxEntries entries or that passes maxPageBytes or maxTokenBytes is an error; so is any
// error of each, which ends the reading.
func decodePage(r io.Reader, maxEntries int, invalid *InvalidTags, each func(tag string) error) error {
	dec := json.NewDecoder(&pageReader{r: r, left: maxPageBytes})
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	if err := members(dec, maxEntries, invalid, each); err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF // json.Decoder's Token reports a page cut short so
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: more data follows the object", errNotTagList)
		}
		return err
	}
	return nil
}

// members reads the members of a tag list object and its closing brace.
func members(dec *json.Decoder, maxEntries int, invalid *InvalidTags, each func(tag string) error) error {
	entries := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		if key != "tags" {
			if err := skipValue(dec); err != nil {
				return err
			}
			continue
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok == nil {
			continue // "tags": null, as some registries answer for a repository without tags
		}
		if tok != json.Delim('[') {
			return fmt.Errorf("%w: the tags member is %s, not an array", errNotTagList, describe(tok))
		}
		for dec.More() {
			if entries++; entries > maxEntries {
				return fmt.Errorf("%w: the page lists more than %d tags (%w)", ErrTagLimit, maxEntries, errPageEntries)
			}
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			tag, ok := tok.(string)
			if !ok {
				return fmt.Errorf("%w: the tags array holds %s, not a string", errNotTagList, describe(tok))
			}
			if !imagename.ValidTag(tag) {
				invalid.add(tag)
				continue
			}
			if err := each(tag); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // ]
			return err
		}
	}
	_, err := dec.Token() // }
	return err
}

// expectDelim reads the next token, which must be want.
func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("%w: it is %s, not an object", errNotTagList, describe(tok))
	}
	return nil
}

// skipValue reads past the value that comes next, whole: a scalar, or an array or object with
// all it holds.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			if depth++; depth > maxDepth {
				return fmt.Errorf("%w: it nests deeper than %d levels", errNotTagList, maxDepth)
			}
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// describe names the kind of a JSON token for an error message, without repeating its text.
func describe(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		if tok == json.Delim('[') {
			return "an array"
		}
		return "an object"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a JSON value"
}

// pageReader passes a page's bytes on to json.Decoder until left runs out, and follows them
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
