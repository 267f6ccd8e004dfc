package imagename

import (
	"regexp"
	"strings"
	"testing"
)

// specTag is the distribution spec's tag grammar, as the spec writes it.
var specTag = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

func TestValidTag(t *testing.T) {
	for tag, want := range map[string]bool{
		"v1.2.3":                   true,
		"latest":                   true,
		"_internal":                true,
		"1":                        true,
		"main-2024.01.01_abc":      true,
		strings.Repeat("a", 128):   true,
		strings.Repeat("a", 129):   false,
		strings.Repeat("a", 10000): false,
		"":                         false,
		".hidden":                  false,
		"-rc":                      false,
		"a/b":                      false,
		"a:b":                      false,
		"a+b":                      false,
		"v1 ":                      false,
		"\x1b[31mred":              false,
		"v1\x1b[31m":               false,
		"v1\u202e3.2":              false,
		"v1\x7f":                   false,
		"v1\xff\xfe":               false,
		"v1\x00":                   false,
		"vé":                       false,
	} {
		if got := ValidTag(tag); got != want {
			t.Errorf("ValidTag(%.40q) = %v, want %v", tag, got, want)
		}
		if got := specTag.MatchString(tag); got != want {
			t.Errorf("the spec's grammar says %v for %.40q; the table is wrong", got, tag)
		}
	}
}

func FuzzValidTag(f *testing.F) {
	for _, seed := range []string{"v1.2.3", "_a", ".a", "a-", strings.Repeat("b", 128), strings.Repeat("b", 129), "\x1b[31m", "a\u202e", "\x7f", "\xff"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, tag string) {
		if got, want := ValidTag(tag), specTag.MatchString(tag); got != want {
			t.Fatalf("ValidTag(%q) = %v, the spec's grammar says %v", tag, got, want)
		}
	})
}
