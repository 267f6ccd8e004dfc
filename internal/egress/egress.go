// Package egress decides which addresses the connections that reflector makes for an object may
// reach. An ImageRepository's spec chooses the registry host, and the registry chooses where its
// redirects and token endpoints lead, so every such connection is checked where it is made: at
// dial time, after name resolution, on the address actually dialled. Loopback, private,
// link-local (the cloud metadata endpoints among them), shared (CGNAT), unspecified, multicast
// and reserved addresses are refused unless the admin's allow-list names them.
//
// The allow-list is REFLECTOR_ALLOWED_NETWORKS: comma- or space-separated entries, each a CIDR
// (10.0.0.0/8), an address (10.1.2.3), an address with a port (127.0.0.1:5000) or a host name
// with a port (registry.internal.svc:5000, trusted whatever it resolves to).
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvAllow is the environment variable that holds the allow-list.
const EnvAllow = "REFLECTOR_ALLOWED_NETWORKS"

// RefusedError is the failure of a connection to an address the guard does not allow. Its
// message names neither the address nor the host: the error reaches statuses and Events that a
// tenant reads, and a refusal must not tell it what an internal name resolves to.
type RefusedError struct{}

func (*RefusedError) Error() string {
	return "the address is not allowed: reflector connects only to public addresses, redirects and token endpoints included, unless the administrator allows one in " + EnvAllow
}

// Refused reports whether err, or an error it wraps, is a guard's refusal.
func Refused(err error) bool {
	_, ok := errors.AsType[*RefusedError](err)
	return ok
}

// Resolver looks up the addresses of a host name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc is the dial function of an http.Transport.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Guard checks addresses against the allow-list. The zero value is not usable; make one with
// Parse, FromEnv or Default. A Guard is safe for concurrent use.
type Guard struct {
	prefixes []netip.Prefix
	addrs    map[netip.AddrPort]bool
	names    map[string]bool
	resolver Resolver
}

// Parse returns a Guard whose allow-list is list (the syntax of EnvAllow).
func Parse(list string) (*Guard, error) {
	g := &Guard{addrs: map[netip.AddrPort]bool{}, names: map[string]bool{}, resolver: net.DefaultResolver}
	for entry := range strings.FieldsFuncSeq(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if err := g.add(entry); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Allow returns a Guard that allows entries (the entries of EnvAllow), for tests and callers
// that know them; it panics on an invalid entry.
func Allow(entries ...string) *Guard {
	g, err := Parse(strings.Join(entries, ","))
	if err != nil {
		panic(err)
	}
	return g
}

func (g *Guard) add(entry string) error {
	if p, err := netip.ParsePrefix(entry); err == nil {
		g.prefixes = append(g.prefixes, p.Masked())
		return nil
	}
	if a, err := netip.ParseAddr(entry); err == nil {
		if err := zoneless(entry, a); err != nil {
			return err
		}
		g.prefixes = append(g.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		return nil
	}
	if ap, err := netip.ParseAddrPort(entry); err == nil {
		if err := zoneless(entry, ap.Addr()); err != nil {
			return err
		}
		g.addrs[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
		return nil
	}
	host, port, err := net.SplitHostPort(entry)
	if err != nil || host == "" || strings.ContainsAny(host, "/[]") {
		return fmt.Errorf("%s: %q is not a CIDR, an address, address:port or host:port", EnvAllow, entry)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%s: %q has no valid port", EnvAllow, entry)
	}
	g.names[strings.ToLower(strings.TrimSuffix(host, "."))+":"+port] = true
	return nil
}

// zoneless refuses an address with an IPv6 zone (fe80::1%eth0): a prefix never contains a zoned
// address, so such an entry would be accepted and then allow nothing, and a zone names an
// interface of the host, which the allow-list does not choose.
func zoneless(entry string, a netip.Addr) error {
	if a.Zone() != "" {
		return fmt.Errorf("%s: %q has an IPv6 zone; name the address without it", EnvAllow, entry)
	}
	return nil
}

// WithResolver returns a copy of g that resolves host names with r.
func (g *Guard) WithResolver(r Resolver) *Guard {
	c := *g
	c.resolver = r
	return &c
}

// FromEnv returns the Guard of EnvAllow; unset, it allows public addresses only.
func FromEnv() (*Guard, error) {
	return Parse(os.Getenv(EnvAllow))
}

var fromEnv = sync.OnceValues(FromEnv)

// Default returns the process's Guard of EnvAllow, read once. An allow-list that does not parse
// allows nothing beyond public addresses; programs call FromEnv at start to report it.
func Default() *Guard {
	g, err := fromEnv()
	if err != nil {
		g, _ = Parse("")
	}
	return g
}

// Allows reports whether a connection to ap is allowed.
func (g *Guard) Allows(ap netip.AddrPort) bool {
	a := ap.Addr().Unmap()
	if g.addrs[netip.AddrPortFrom(a, ap.Port())] {
		return true
	}
	for _, p := range g.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return Public(a)
}

// allowsName reports whether the allow-list trusts host:port by name.
func (g *Guard) allowsName(host, port string) bool {
	return len(g.names) > 0 && g.names[strings.ToLower(strings.TrimSuffix(host, "."))+":"+port]
}

// Public reports whether a is a globally reachable unicast address: not loopback, private
// (RFC 1918, RFC 4193), link-local, shared (RFC 6598, carrier-grade NAT), unspecified,
// multicast, broadcast or otherwise reserved, and not a translation of such an address
// (IPv4-mapped, NAT64, 6to4).
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range reserved {
		if p.Contains(a) {
			return false
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a), nat64Local.Contains(a):
			return Public(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return Public(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return true
}

var (
	reserved = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),         // "this network"
		netip.MustParsePrefix("100.64.0.0/10"),     // shared address space, carrier-grade NAT
		netip.MustParsePrefix("192.0.0.0/24"),      // IETF protocol assignments
		netip.MustParsePrefix("198.18.0.0/15"),     // benchmarking
		netip.MustParsePrefix("240.0.0.0/4"),       // reserved, and the limited broadcast address
		netip.MustParsePrefix("100::/64"),          // discard-only
		netip.MustParsePrefix("2001::/23"),         // IETF protocol assignments (Teredo among them)
		netip.MustParsePrefix("fec0::/10"),         // deprecated site-local
		netip.MustParsePrefix("::/96"),             // IPv4-compatible, deprecated
		netip.MustParsePrefix("fd00:ec2::254/128"), // AWS's IPv6 metadata endpoint (inside fc00::/7 too)
	}
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour  = netip.MustParsePrefix("2002::/16")
)

// Dial wraps dial, the inner dial function of a transport, so that it connects only to allowed
// addresses. With dial nil the guard dials itself, like go-containerregistry's default
// transport: a host name is resolved here and only allowed addresses are dialled, by number, so
// the address checked is the address connected to whatever the name resolves to a moment later,
// and each socket's address is checked once more as it connects; a name that the allow-list
// trusts by name is dialled as it is. A dial function of the caller's own decides where a name
// leads, so the guard checks the address it connected to and closes a refused connection before
// anything is sent on it.
func (g *Guard) Dial(dial DialFunc) DialFunc {
	if dial != nil {
		return g.checkConnected(dial)
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if g.allowsName(host, port) {
			trusted := *d
			trusted.Control = nil
			return trusted.DialContext(ctx, network, addr)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("dialing: port %q is not a number", port)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			if !g.Allows(netip.AddrPortFrom(a, uint16(p))) {
				return nil, refused(network)
			}
			return d.DialContext(ctx, network, addr)
		}
		ips, err := g.resolver.LookupNetIP(ctx, ipNetwork(network), host)
		if err != nil {
			return nil, err
		}
		var firstErr error
		for _, a := range ips {
			if !g.Allows(netip.AddrPortFrom(a, uint16(p))) {
				continue
			}
			conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), uint16(p)).String())
			if err == nil {
				return conn, nil
			}
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		if firstErr != nil {
			return nil, firstErr
		}
		return nil, refused(network)
	}
}

// checkConnected wraps a dial function of the caller's own.
func (g *Guard) checkConnected(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err == nil && g.allowsName(host, port) {
			return dial(ctx, network, addr)
		}
		if err == nil {
			if a, perr := netip.ParseAddr(host); perr == nil {
				p, _ := strconv.ParseUint(port, 10, 16)
				if !g.Allows(netip.AddrPortFrom(a, uint16(p))) {
					return nil, refused(network)
				}
			}
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		remote, ok := conn.RemoteAddr().(*net.TCPAddr)
		if !ok || !g.Allows(remote.AddrPort()) {
			conn.Close()
			return nil, refused(network)
		}
		return conn, nil
	}
}

func refused(network string) error {
	return &net.OpError{Op: "dial", Net: network, Err: &RefusedError{}}
}

// control is the last check of a dial by the guard's own dialer, on the address the socket
// connects to.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	if !g.Allows(ap) {
		return &RefusedError{}
	}
	return nil
}

func ipNetwork(network string) string {
	switch network {
	case "tcp4", "udp4":
		return "ip4"
	case "tcp6", "udp6":
		return "ip6"
	}
	return "ip"
}

// Transport returns a clone of t whose connections the guard checks. Its proxy, when one is
// used, is dialled through the guard too; the host behind the proxy is resolved by the proxy, so
// RoundTripper's check of address literals is what covers it.
func (g *Guard) Transport(t *http.Transport) *http.Transport {
	c := t.Clone()
	c.DialContext = g.Dial(t.DialContext)
	// Neither may bypass DialContext.
	c.DialTLSContext, c.DialTLS = nil, nil
	return c
}

// RoundTripper returns next with every request whose URL names an address literal checked
// before it leaves, so that a request sent through a proxy cannot name an internal address
// either.
func (g *Guard) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return &checkedRequests{guard: g, next: next}
}

type checkedRequests struct {
	guard *Guard
	next  http.RoundTripper
}

func (c *checkedRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := c.guard.CheckURLHost(req.URL.Scheme, req.URL.Host); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return c.next.RoundTrip(req)
}

// CheckURLHost checks the host of a URL of scheme when it is an address literal; a name passes,
// as it is checked when it is dialled.
func (g *Guard) CheckURLHost(scheme, hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.Trim(hostport, "[]"), map[string]string{"http": "80", "https": "443"}[scheme]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	p, _ := strconv.ParseUint(port, 10, 16)
	if !g.Allows(netip.AddrPortFrom(a, uint16(p))) && !g.allowsName(host, port) {
		return &RefusedError{}
	}
	return nil
}
