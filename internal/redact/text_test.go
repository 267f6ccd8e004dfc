package redact

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "GET https://ghcr.io/v2/app/tags/list: 500 Internal Server Error", "GET https://ghcr.io/v2/app/tags/list: 500 Internal Server Error"},
		{"terminal escape", "tag \x1b[31mred\x1b[0m", `tag \x1b[31mred\x1b[0m`},
		{"right-to-left override", "tag v1\u202e3.2", `tag v1\u202e3.2`},
		{"DEL and NUL", "a\x7fb\x00c", `a\x7fb\x00c`},
		{"invalid UTF-8", "v1\xff\xfe", `v1\xff\xfe`},
		{"line breaks and tabs", "<html>\r\n\t<body>", `<html>\r\n\t<body>`},
		{"printable non-ASCII kept", "Fehler: Zugriff verweigert – é", "Fehler: Zugriff verweigert – é"},
		{"userinfo masked", "proxy http://u:planted@127.0.0.1:1\n", `proxy http://xxxxx@127.0.0.1:1\n`},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Text(tt.in); got != tt.want {
				t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := Text(tt.want); got != tt.want {
				t.Errorf("Text changes its own output %q into %q", tt.want, got)
			}
		})
	}
}

func TestTextBoundsLongText(t *testing.T) {
	body := "unexpected status code 500: " + strings.Repeat("<p>registry error page\x1b[0m</p>\n", 48<<10/34) + " the end"
	got := Text(body)
	if len(got) > MaxText {
		t.Errorf("Text of %d bytes is %d bytes long, over %d", len(body), len(got), MaxText)
	}
	if !strings.HasPrefix(got, "unexpected status code 500: <p>registry error page\\x1b[0m</p>\\n") || !strings.HasSuffix(got, " the end") {
		t.Errorf("Text does not keep the start and the end: %q", got)
	}
	if !strings.Contains(got, " bytes left out] … ") {
		t.Errorf("Text does not say that it left bytes out: %q", got)
	}
	// A userinfo where the cut falls is masked before the cut.
	secret := strings.Repeat("x", 700) + " http://user:" + strings.Repeat("planted", 100) + "@127.0.0.1:1/ " + strings.Repeat("y", 700)
	if got := Text(secret); strings.Contains(got, "planted") || len(got) > MaxText {
		t.Errorf("Text of a long userinfo: %d bytes, %q", len(got), got)
	}
	// Cuts fall on character boundaries.
	if got := Text(strings.Repeat("é", 2000)); !utf8.ValidString(got) || len(got) > MaxText {
		t.Errorf("Text of 2000 é: %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
}

func FuzzText(f *testing.F) {
	for _, seed := range []string{"", "plain", "\x1b[31m", "\u202e", "\xff", "http://u:p@h", strings.Repeat("é\x00", 800)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		if len(got) > MaxText {
			t.Fatalf("Text(%q) has %d bytes", s, len(got))
		}
		if !utf8.ValidString(got) {
			t.Fatalf("Text(%q) = %q is not valid UTF-8", s, got)
		}
		for _, r := range got {
			if r != ' ' && !strconv.IsPrint(r) {
				t.Fatalf("Text(%q) = %q holds %U", s, got, r)
			}
		}
		if len(s) <= MaxText/4 && !strings.ContainsAny(s, `@\`) {
			// Short text without an address or a backslash is only escaped: unquoting gives it
			// back.
			back, err := strconv.Unquote(`"` + strings.ReplaceAll(got, `"`, `\"`) + `"`)
			if err != nil || back != s {
				t.Fatalf("Text(%q) = %q does not unquote to it: %q, %v", s, got, back, err)
			}
		}
	})
}
