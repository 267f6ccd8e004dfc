// Package replay reads the example payloads that a documentation page marks for replay, so that
// tests can feed them to the code that parses them and the page cannot drift from it.
//
// A marked example is an HTML comment, which Markdown does not render, directly followed by a
// fenced json block:
//
//	<!-- replay: provider=github header="X-GitHub-Event: package" image=ghcr.io/acme/app tag=v1.2.3 -->
//	```json
//	{...}
//	```
//
// The comment holds key=value attributes (a value with spaces is quoted; a key may repeat, and
// a key without a value is a flag); what they mean is the test's business.
package replay

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Example is one marked example of a page.
type Example struct {
	// File and Line locate the comment, for messages.
	File string
	Line int
	// Attrs holds the comment's attributes, each key's values in order.
	Attrs map[string][]string
	// Body is the fenced block's text, without the fences and the final newline.
	Body []byte
}

// Get returns the first value of key, "" when the comment has none.
func (e Example) Get(key string) string {
	if v := e.Attrs[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Has reports whether the comment names key, with or without a value.
func (e Example) Has(key string) bool {
	_, ok := e.Attrs[key]
	return ok
}

// Where is the example's file:line.
func (e Example) Where() string {
	return e.File + ":" + strconv.Itoa(e.Line)
}

var (
	comment = regexp.MustCompile(`^<!-- replay: (.*) -->$`)
	attr    = regexp.MustCompile(`([a-z]+)(?:=(?:"([^"]*)"|(\S+)))?`)
)

// Read returns the marked examples of file, failing the test when the file cannot be read or a
// comment is not directly followed by a fenced json block (so that no example can lose its
// replay by being moved), or when the file marks none.
func Read(tb testing.TB, file string) []Example {
	tb.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var out []Example
	for i := 0; i < len(lines); i++ {
		m := comment.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		e := Example{File: file, Line: i + 1, Attrs: map[string][]string{}}
		for _, a := range attr.FindAllStringSubmatch(m[1], -1) {
			e.Attrs[a[1]] = append(e.Attrs[a[1]], a[2]+a[3])
		}
		if i+1 >= len(lines) || lines[i+1] != "```json" {
			tb.Fatalf("%s: a replay comment not followed by a ```json block", e.Where())
		}
		var body []string
		for i += 2; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		e.Body = []byte(strings.Join(body, "\n"))
		out = append(out, e)
	}
	if len(out) == 0 {
		tb.Fatalf("%s marks no example for replay", file)
	}
	return out
}
