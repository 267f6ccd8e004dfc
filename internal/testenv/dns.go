package testenv

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a DNS server on 127.0.0.1 that answers A and AAAA queries for a fixed set of names,
// and nothing for any other: a test resolver for code that resolves names itself, so that a
// test can make a name resolve to an address of its choosing without asking any other server.
type DNS struct {
	conn    net.PacketConn
	mu      sync.Mutex
	names   map[string][]netip.Addr
	queries atomic.Int64
}

// NewDNS starts a DNS server that resolves each of names (without a trailing dot) to its
// addresses. It stops when the test ends.
func NewDNS(t testing.TB, names map[string][]netip.Addr) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{conn: pc, names: map[string][]netip.Addr{}}
	for n, a := range names {
		d.Set(n, a...)
	}
	t.Cleanup(func() { pc.Close() })
	go d.serve()
	return d
}

// Set makes name resolve to addrs.
func (d *DNS) Set(name string, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names[strings.ToLower(strings.TrimSuffix(name, "."))] = addrs
}

// Queries returns the number of queries the server answered.
func (d *DNS) Queries() int64 { return d.queries.Load() }

// Resolver returns a Go resolver that asks this server only.
func (d *DNS) Resolver() *net.Resolver {
	addr := d.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "udp", addr)
	}}
}

func (d *DNS) serve() {
	buf := make([]byte, 512)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if msg, ok := d.answer(buf[:n]); ok {
			d.queries.Add(1)
			_, _ = d.conn.WriteTo(msg, from)
		}
	}
}

// answer builds the response to one query.
func (d *DNS) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	d.mu.Lock()
	addrs := d.names[strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))]
	d.mu.Unlock()
	rcode := dnsmessage.RCodeSuccess
	if addrs == nil {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	for _, a := range addrs {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, false
		}
	}
	msg, err := b.Finish()
	return msg, err == nil
}
