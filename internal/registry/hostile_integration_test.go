package registry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

// hostileTags are tags a registry may list that the distribution spec's grammar does not allow.
var hostileTags = []string{
	strings.Repeat("9", 10_000), // sorts after every digit-led valid tag
	"\x1b[31mred",               // a terminal escape
	"zz\u202ev1.0",              // a right-to-left override
	"zz\x7f",                    // DEL
	"zz\xff\xfe",                // invalid UTF-8
	"",                          // empty
	"-rc",                       // a first character the grammar does not allow
}

// tagPage is the JSON of a tags/list page. json.Marshal turns invalid UTF-8 into U+FFFD, so
// the page is written by hand: every byte reaches the client as it is.
func tagPage(tags []string) string {
	var b strings.Builder
	b.WriteString(`{"name":"app","tags":[`)
	for i, tag := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(tag); j++ {
			switch c := tag[j]; {
			case c < 0x20 || c == '"' || c == '\\':
				fmt.Fprintf(&b, `\u%04x`, c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestIntegrationListTagsLeavesOutInvalidTags(t *testing.T) {
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "v1.0.0")
	page := tagPage(append([]string{"v1.0.0", "v2.0.0"}, hostileTags...))
	reg.Inject(testenv.RegistryFault{Path: "/tags/list", Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: page})

	res, err := scan(t, fast(), nil, imageRepository("default", reg.Image("app")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tags, []string{"v1.0.0", "v2.0.0"}) {
		t.Errorf("tags %q, want v1.0.0 and v2.0.0 only", res.Tags)
	}
	if res.Invalid.Count != len(hostileTags) {
		t.Errorf("%d invalid tags counted, want %d", res.Invalid.Count, len(hostileTags))
	}
	msg := res.Invalid.String()
	if !strings.Contains(msg, fmt.Sprintf("left out %d tags", len(hostileTags))) || !strings.Contains(msg, `such as "9999`) || len(msg) > 300 {
		t.Errorf("message %q", msg)
	}
}

// streamedPage returns a reader of a tags/list page that starts with prefix and repeats
// element until the page has size bytes.
func streamedPage(prefix, element string, size int64) func() io.Reader {
	return func() io.Reader {
		return testenv.Page(prefix, testenv.Repeating(element), size)
	}
}

func TestIntegrationListTagsRefusesHugePages(t *testing.T) {
	const size = 200 << 20
	tests := []struct {
		name   string
		stream func() io.Reader
		says   string
	}{
		{"one string of 200 MiB", streamedPage(`{"tags":["`, "a", size), "a JSON value of more than 64 KiB"},
		{"200 MiB of tags of 10 kB", streamedPage(`{"tags":["`, strings.Repeat("x", 10_000)+`","`, size), "larger than 32 MiB"},
		{"200 MiB of distinct valid tags", func() io.Reader {
			return testenv.Page(`{"tags":[`, testenv.Elements("tag-%d"), size)
		}, "more than 200000 tags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := testenv.NewRegistry(t)
			reg.Push(t, "app", "v1")
			reg.Inject(testenv.RegistryFault{Path: "/tags/list", Status: http.StatusOK, Stream: tt.stream})
			_, err := scan(t, fast(), nil, imageRepository("default", reg.Image("app")))
			wantError(t, err, v1.ReadOperationFailedReason, tt.says, "listing tags of "+reg.Image("app"))
		})
	}
}

func TestIntegrationRegistryErrorsAreBounded(t *testing.T) {
	body := strings.Repeat("<p>an error page of 48 KiB \x1b[31m\u202e</p>\n", 48<<10/40)
	structured, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": "UNKNOWN", "message": body}}})
	tests := []struct {
		name  string
		fault testenv.RegistryFault
		n     int
	}{
		{"a 48 KiB error page", testenv.RegistryFault{Path: "/tags/list", Status: http.StatusNotFound, Body: body}, 1},
		{"a 48 KiB error message, retried", testenv.RegistryFault{Path: "/tags/list", Status: http.StatusInternalServerError,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: string(structured)}, registry.DefaultMaxRetries + 1},
		{"a 48 KiB Link header", testenv.RegistryFault{Path: "/tags/list", Status: http.StatusOK,
			Header: http.Header{"Link": {"<" + strings.Repeat("x", 48<<10) + ">; rel=\"next\"; x=\"\x7f"}}, Body: `{"tags":["v1"]}`}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := testenv.NewRegistry(t)
			reg.Push(t, "app", "v1")
			for range tt.n {
				reg.Inject(tt.fault)
			}
			_, err := scan(t, fast(), nil, imageRepository("default", reg.Image("app")))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if len(msg) > redact.MaxText {
				t.Errorf("the error is %d bytes long", len(msg))
			}
			if strings.ContainsAny(msg, "\x1b\u202e\n\x7f") {
				t.Errorf("the error holds unescaped characters: %q", msg)
			}
			if !strings.HasPrefix(msg, "listing tags of "+reg.Image("app")) {
				t.Errorf("the error does not start with what failed: %.200q", msg)
			}
			var re *registry.Error
			if !errors.As(err, &re) {
				t.Errorf("the error is not a *registry.Error: %T", err)
			}
		})
	}
}
