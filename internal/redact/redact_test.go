package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no address", "listing tags of 127.0.0.1:5000/app: 404 Not Found", "listing tags of 127.0.0.1:5000/app: 404 Not Found"},
		{"URL without userinfo", "GET https://ghcr.io/v2/app/tags/list?n=1000: UNAUTHORIZED", "GET https://ghcr.io/v2/app/tags/list?n=1000: UNAUTHORIZED"},
		{"user and password", "proxy socks5://user:PASSWORD@127.0.0.1:1080 refused", "proxy socks5://xxxxx@127.0.0.1:1080 refused"},
		{"user name only", "sink https://TOKEN@broker.example/ns", "sink https://xxxxx@broker.example/ns"},
		{"quoted, as %q and url.Error render it", `Get "http://u:p@127.0.0.1:1/v2/": EOF`, `Get "http://xxxxx@127.0.0.1:1/v2/": EOF`},
		{"net/http's stripped password", `Get "http://u:***@127.0.0.1:1/": EOF`, `Get "http://xxxxx@127.0.0.1:1/": EOF`},
		{"password with @ and /", "address https://user:p@s/s:w@rd@host:8080/x is bad", "address https://xxxxx@host:8080/x is bad"},
		{"password with a scheme in it", "socks5://user:a://b@host", "socks5://xxxxx@host"},
		{"percent-encoded password", "http://user:p%40ss@host", "http://xxxxx@host"},
		{"no scheme", "dial user:pass@127.0.0.1:1080: refused", "dial xxxxx@127.0.0.1:1080: refused"},
		{"no scheme, in quotes", `address "user:pass@127.0.0.1:1080"`, `address "xxxxx@127.0.0.1:1080"`},
		{"no scheme, odd password", "user:p/a:s\"s@host", "xxxxx@host"},
		{"not a scheme before ://", "address=socks5://user:pass@host", "xxxxx@host"},
		{"non-ASCII space in the password", "http://user:pa\u00a0ss@host", "http://xxxxx@host"},
		{"digest", "latest is ghcr.io/org/app:1.2.3@sha256:" + strings.Repeat("ab", 32), "latest is ghcr.io/org/app:1.2.3@sha256:" + strings.Repeat("ab", 32)},
		{"userinfo and digest", "oci://u:p@host/app@sha256:" + strings.Repeat("0", 64), "oci://xxxxx@host/app@sha256:" + strings.Repeat("0", 64)},
		{"e-mail address", "pushed by dev@example.com", "pushed by dev@example.com"},
		{"empty userinfo", "http://@host", "http://@host"},
		{"two URLs", "a http://u:p1@h1 b\thttp://u:p2@h2\n", "a http://xxxxx@h1 b\thttp://xxxxx@h2\n"},
		{"white space kept", "  x  http://u:p@h  ", "  x  http://xxxxx@h  "},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := String(tt.want); got != tt.want {
				t.Errorf("String is not idempotent: String(%q) = %q", tt.want, got)
			}
		})
	}
}

func TestAddress(t *testing.T) {
	tests := []struct{ in, want string }{
		{"socks5://user:PASSWORD@127.0.0.1:1080", "socks5://xxxxx@127.0.0.1:1080"},
		{"http://user:pass word@127.0.0.1:3128", "http://xxxxx@127.0.0.1:3128"},
		{"user:pass word@127.0.0.1:3128", "xxxxx@127.0.0.1:3128"},
		{"http://proxy.example:3128", "http://proxy.example:3128"},
		{"http://broker-ingress.knative-eventing.svc.cluster.local/ns/default", "http://broker-ingress.knative-eventing.svc.cluster.local/ns/default"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Address(tt.in); got != tt.want {
			t.Errorf("Address(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestError(t *testing.T) {
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	plain := errors.New("nothing to hide")
	if Error(plain) != plain {
		t.Error("an error without userinfo is not returned as it is")
	}
	cause := &url.Error{Op: "Get", URL: "http://u:secret@127.0.0.1:1/", Err: errors.New("EOF")}
	err := Error(fmt.Errorf("listing: %w", cause))
	if got, want := err.Error(), `listing: Get "http://xxxxx@127.0.0.1:1/": EOF`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if ue, ok := errors.AsType[*url.Error](err); !ok || ue != cause {
		t.Error("the redacted error does not wrap its cause")
	}
	if wrapped := fmt.Errorf("scan: %w", err); strings.Contains(wrapped.Error(), "secret") {
		t.Errorf("wrapping brings the password back: %v", wrapped)
	}
}

// FuzzRedactURL builds URLs with userinfo from arbitrary parts and puts them between arbitrary
// words: String must mask the userinfo and leave everything else as it is, so the password
// never survives. A host that reads as a digest (sha256:<hex>, never a real host and port) is
// left out. Where net/url parses the URL, the result must parse to the same host and path.
func FuzzRedactURL(f *testing.F) {
	f.Add("see ", "socks5", "user", "PASSWORD", "127.0.0.1:1080", " there")
	f.Add("", "https", "robot", "p@ss/w:rd?#", "registry.example/v2/", "")
	f.Add("x\t", "http", "", "s3cret", "[::1]:3128", "\ny")
	f.Add("", "oci", "u", "p", "host/app@sha256:"+strings.Repeat("a", 64), "")
	f.Add("", "http", "a@b", `"q"\u00e9`, "h", ", done")
	f.Fuzz(func(t *testing.T, prefix, scheme, user, password, hostPath, suffix string) {
		if !isScheme(scheme) || password == "" || strings.ContainsAny(user+password+hostPath, space) ||
			hostPath == "" || strings.Contains(hostPath, "@") || isDigest(hostPath) ||
			prefix != "" && !strings.ContainsAny(prefix[len(prefix)-1:], space) ||
			suffix != "" && !strings.ContainsAny(suffix[:1], space) {
			return
		}
		addr := scheme + "://" + user + ":" + password + "@" + hostPath
		want := scheme + "://" + Mask + "@" + hostPath
		got := String(prefix + addr + suffix)
		if expected := String(prefix) + want + String(suffix); got != expected {
			t.Fatalf("String(%q) = %q, want %q", prefix+addr+suffix, got, expected)
		}
		if strings.Contains(got, password) && !strings.Contains(String(prefix)+want+String(suffix), password) {
			t.Fatalf("the password %q survives: %q", password, got)
		}
		if got := Address(addr); got != want {
			t.Fatalf("Address(%q) = %q, want %q", addr, got, want)
		}
		if u, err := url.Parse(addr); err == nil && u.User != nil && u.User.String() == url.UserPassword(user, password).String() {
			r, err := url.Parse(Address(addr))
			if err != nil || r.Host != u.Host || r.Path != u.Path || r.RawQuery != u.RawQuery || r.User.String() != Mask {
				t.Fatalf("net/url reads %q as %#v, and its redaction as %#v (%v)", addr, u, r, err)
			}
		}
	})
}

// FuzzRedactAddress builds addresses without a scheme, user:password@host, with arbitrary
// passwords, white space included: Address masks the userinfo whole, and String does so as long
// as the password has no ASCII white space.
func FuzzRedactAddress(f *testing.F) {
	f.Add("user", "PASSWORD", "127.0.0.1:1080")
	f.Add("u", "pa ss\t@x:y", "proxy.example:3128")
	f.Add(`"robot`, "a://b", "h")
	f.Fuzz(func(t *testing.T, user, password, host string) {
		if password == "" || host == "" || strings.ContainsAny(host, space+"@") || isDigest(host) ||
			strings.Contains(user, "://") || strings.ContainsAny(user, space) ||
			isScheme(strings.TrimLeft(user, opening)) && strings.HasPrefix(password, "//") {
			return
		}
		addr := user + ":" + password + "@" + host
		lead := user[:len(user)-len(strings.TrimLeft(user, opening))]
		want := lead + Mask + "@" + host
		if got := Address(addr); got != want {
			t.Fatalf("Address(%q) = %q, want %q", addr, got, want)
		}
		if strings.ContainsAny(password, space) {
			return
		}
		got := String(addr)
		if got != want {
			t.Fatalf("String(%q) = %q, want %q", addr, got, want)
		}
		if strings.Contains(got, password) && !strings.Contains(want, password) {
			t.Fatalf("the password %q survives: %q", password, got)
		}
	})
}

// FuzzRedactString feeds arbitrary text: String must not panic, must be idempotent, and must
// leave text without "@" alone.
func FuzzRedactString(f *testing.F) {
	f.Add("proxy socks5://user:PASSWORD@127.0.0.1:1080 refused")
	f.Add("repo@sha256:" + strings.Repeat("f", 64))
	f.Add("((@x")
	f.Fuzz(func(t *testing.T, s string) {
		once := String(s)
		if twice := String(once); twice != once {
			t.Fatalf("String(%q) = %q, but String of that = %q", s, once, twice)
		}
		if !strings.Contains(s, "@") && once != s {
			t.Fatalf("String(%q) = %q changed text without @", s, once)
		}
	})
}
