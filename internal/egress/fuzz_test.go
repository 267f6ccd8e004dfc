package egress_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/egress"
)

// FuzzParse checks that any allow-list either parses or is refused with an error naming the
// setting, and that a parsed one allows each address it names and still refuses what it does
// not name.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "127.0.0.1/32", "10.0.0.0/8, 127.0.0.1:5000 registry.internal:5000", "::1", "[::1]:80", "fd00::/8", "a:b:c", "host:", ":80", "0.0.0.0/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		g, err := egress.Parse(list)
		if err != nil {
			if !strings.Contains(err.Error(), egress.EnvAllow) {
				t.Fatalf("error %q does not name %s", err, egress.EnvAllow)
			}
			return
		}
		for entry := range strings.FieldsFuncSeq(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
			if ap, err := netip.ParseAddrPort(entry); err == nil && !g.Allows(ap) {
				t.Fatalf("%q allows %s, but Allows says no", list, ap)
			}
			if a, err := netip.ParseAddr(entry); err == nil && !g.Allows(netip.AddrPortFrom(a, 443)) {
				t.Fatalf("%q allows %s, but Allows says no", list, a)
			}
		}
		if !strings.ContainsAny(list, "0123456789abcdefABCDEF:") {
			return
		}
		// 127.0.0.3:9 is allowed only when the list names it.
		if g.Allows(netip.MustParseAddrPort("127.0.0.3:9")) {
			named := false
			for entry := range strings.FieldsFuncSeq(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
				if p, err := netip.ParsePrefix(entry); err == nil && p.Contains(netip.MustParseAddr("127.0.0.3")) {
					named = true
				}
				if a, err := netip.ParseAddr(entry); err == nil && a.Unmap() == netip.MustParseAddr("127.0.0.3") {
					named = true
				}
				if ap, err := netip.ParseAddrPort(entry); err == nil && ap.Addr().Unmap() == netip.MustParseAddr("127.0.0.3") && ap.Port() == 9 {
					named = true
				}
			}
			if !named {
				t.Fatalf("%q allows 127.0.0.3:9 without naming it", list)
			}
		}
	})
}
