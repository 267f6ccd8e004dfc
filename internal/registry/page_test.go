package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/imagename"
)

// decodeAll decodes page and returns its kept tags.
func decodeAll(page io.Reader, maxEntries int) ([]string, InvalidTags, error) {
	var tags []string
	var invalid InvalidTags
	err := decodePage(page, maxEntries, &invalid, func(tag string) error {
		tags = append(tags, tag)
		return nil
	})
	return tags, invalid, err
}

func TestDecodePage(t *testing.T) {
	long := strings.Repeat("a", 10_000)
	tests := []struct {
		name    string
		page    string
		tags    []string
		invalid int
		example string
		err     string
	}{
		{"distribution", `{"name":"org/app","tags":["v1","v2"]}`, []string{"v1", "v2"}, 0, "", ""},
		{"tags first, white space", " {\n  \"tags\" : [ \"v1\" ] ,\n  \"name\" : \"app\"\n}\n", []string{"v1"}, 0, "", ""},
		{"null tags", `{"name":"app","tags":null}`, nil, 0, "", ""},
		{"no tags member", `{"name":"app"}`, nil, 0, "", ""},
		{"other members skipped, GCR's manifest map", `{"child":[],"manifest":{"sha256:1":{"tag":["v1"],"timeCreatedMs":"1","x":[1,{"y":null}]}},"name":"app","tags":["v1"]}`, []string{"v1"}, 0, "", ""},
		{"escapes decoded", `{"tags":["v\u0031","\u001b[31m"]}`, []string{"v1"}, 1, "\x1b[31m", ""},
		{"invalid tags left out", `{"tags":["v1","` + long + `","\u001b[31m","v1\u202e","v1` + "\x7f" + `","v1` + "\xff" + `",".x","","v2"]}`,
			[]string{"v1", "v2"}, 7, long[:maxExample], ""},
		{"a number in the tags", `{"tags":["v1",2]}`, nil, 0, "", "the tags array holds a number, not a string"},
		{"tags an object", `{"tags":{"v1":1}}`, nil, 0, "", "the tags member is an object, not an array"},
		{"an array", `["v1"]`, nil, 0, "", "it is an array, not an object"},
		{"trailing data", `{"tags":["v1"]} {}`, nil, 0, "", "more data follows the object"},
		{"cut short", `{"tags":["v1",`, nil, 0, "", "unexpected EOF"},
		{"not JSON", `<html>`, nil, 0, "", "'<' where an object should be"},
		{"empty object", `{}`, nil, 0, "", ""},
		{"empty tags", ` { "tags" : [ ] } `, nil, 0, "", ""},
		{"escaped quotes and backslashes", `{"name":"a\"b\\","tags":["v\\","v1\"x","v2"],"x":"\\\""}`, []string{"v2"}, 2, `v\`, ""},
		{"nested members skipped", `{"x":[[],{},[1,-2.5e3,true,false,null,"s",{"a":{"b":[]}}]],"tags":["v1"],"y":{}}`, []string{"v1"}, 0, "", ""},
		{"an invalid literal", `{"x":tru,"tags":["v1"]}`, nil, 0, "", "is not a JSON value"},
		{"a control character in a string", "{\"tags\":[\"v\x01\"]}", nil, 0, "", "a control character"},
		{"a bad escape", `{"tags":["v\q"]}`, nil, 0, "", "invalid JSON"},
		{"a missing colon", `{"tags" ["v1"]}`, nil, 0, "", "where ':' should be"},
		{"a missing comma", `{"tags":["v1" "v2"]}`, nil, 0, "", "where a comma or the end of the array should be"},
		{"a trailing comma", `{"tags":["v1",]}`, nil, 0, "", "the tags array holds"},
		{"too many entries", `{"tags":["a","b","c","d"]}`, nil, 0, "", "the page lists more than 3 tags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit := 20
			if tt.name == "too many entries" {
				limit = 3
			}
			tags, invalid, err := decodeAll(strings.NewReader(tt.page), limit)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(tags, tt.tags) || invalid.Count != tt.invalid || invalid.Example != tt.example {
				t.Errorf("tags %q, %d invalid such as %.80q; want %q, %d such as %.80q", tags, invalid.Count, invalid.Example, tt.tags, tt.invalid, tt.example)
			}
		})
	}
}

// endless is a reader of a JSON prefix, then repeat without end.
type endless struct {
	prefix string
	repeat string
	off    int
}

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if e.prefix != "" {
			c := copy(p[n:], e.prefix)
			e.prefix = e.prefix[c:]
			n += c
			continue
		}
		c := copy(p[n:], e.repeat[e.off:])
		e.off = (e.off + c) % len(e.repeat)
		n += c
	}
	return n, nil
}

func TestDecodePageBounds(t *testing.T) {
	tests := []struct {
		name string
		page io.Reader
		want error
	}{
		{"one endless string", &endless{prefix: `{"tags":["`, repeat: "a"}, errTokenTooLarge},
		{"one endless name", &endless{prefix: `{"name":"`, repeat: "\\u0041"}, errTokenTooLarge},
		{"one endless number", &endless{prefix: `{"tags":[1`, repeat: "1"}, errTokenTooLarge},
		{"endless white space", &endless{prefix: `{"tags":[`, repeat: " "}, errTokenTooLarge},
		{"endless invalid tags", &endless{prefix: `{"tags":["`, repeat: strings.Repeat("x", 10_000) + `","`}, errPageTooLarge},
		{"endless nesting", &endless{prefix: `{"name":`, repeat: "["}, errNotTagList},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := decodeAll(tt.page, 1<<30)
			if !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
		})
	}
	// A page of exactly maxPageBytes is read whole.
	var b strings.Builder
	b.WriteString(`{"tags":["v1"]`)
	member := `,"x":"` + strings.Repeat("a", 1000) + `"`
	for b.Len()+len(member)+1 < maxPageBytes {
		b.WriteString(member)
	}
	b.WriteString(`,"y":"`)
	b.WriteString(strings.Repeat("b", maxPageBytes-b.Len()-2))
	b.WriteString(`"}`)
	page := b.String()
	if _, _, err := decodeAll(strings.NewReader(page), 10); err != nil {
		t.Errorf("a page of exactly %d bytes: %v", maxPageBytes, err)
	}
}

func TestInvalidTagsString(t *testing.T) {
	var v InvalidTags
	if got := v.String(); got != "" {
		t.Errorf("no invalid tags: %q", got)
	}
	kept := v.Keep([]string{"v1", "\x1b[31mred", strings.Repeat("\u202e", 100), "v2"})
	if !slices.Equal(kept, []string{"v1", "v2"}) {
		t.Errorf("Keep = %q", kept)
	}
	got := v.String()
	if want := `left out 2 tags that are not valid tag names (the distribution spec allows [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}), such as "\x1b[31mred"`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	var w InvalidTags
	w.Keep([]string{strings.Repeat("\u202e", 100)})
	if got := w.String(); !strings.HasSuffix(got, `such as "`+strings.Repeat(`\u202e`, 21)+`\xe2"…`) {
		t.Errorf("String() = %q", got)
	}
}

// FuzzDecodePage checks decodePage against encoding/json: what one reads, the other reads
// alike, and no tag outside the grammar is kept.
func FuzzDecodePage(f *testing.F) {
	for _, seed := range []string{`{"name":"a","tags":["v1","v2"]}`, `{"tags":null}`, `{"tags":["\u001b","` + "\xff" + `"]}`,
		`{"manifest":{"a":[1,2,{"b":null}]},"tags":[]}`, `[`, `{"tags":[1]}`, `{"tags":["a\"b","c\\"]}`, ` {} `} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		tags, invalid, err := decodeAll(bytes.NewReader(page), 1000)
		var std struct {
			Tags []string `json:"tags"`
		}
		stdErr := json.Unmarshal(page, &std)
		comparable := bytes.Count(page, []byte(`"tags"`)) <= 1 && bytes.Count(page, []byte(`tags`)) <= 1 &&
			bytes.Count(page, []byte("["))+bytes.Count(page, []byte("{")) <= maxDepth && len(std.Tags) <= 1000
		if err == nil {
			if stdErr != nil {
				t.Fatalf("decodePage read %q, which encoding/json refuses: %v", page, stdErr)
			}
			for _, tag := range tags {
				if !imagename.ValidTag(tag) {
					t.Fatalf("kept %q from %q", tag, page)
				}
			}
			if len(invalid.Example) > maxExample {
				t.Fatalf("example of %d bytes", len(invalid.Example))
			}
		}
		trimmed := bytes.TrimLeft(page, " \t\r\n")
		if stdErr != nil || !comparable || len(trimmed) == 0 || trimmed[0] != '{' {
			return
		}
		if err != nil {
			t.Fatalf("decodePage refuses %q, which encoding/json reads: %v", page, err)
		}
		var want []string
		for _, tag := range std.Tags {
			if imagename.ValidTag(tag) {
				want = append(want, tag)
			}
		}
		if !slices.Equal(tags, want) {
			t.Fatalf("decodePage kept %q of %q, encoding/json's valid tags are %q", tags, page, want)
		}
	})
}
