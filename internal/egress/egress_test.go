package egress_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8":             true,
		"2606:4700::1111":     true,
		"127.0.0.1":           false,
		"127.0.0.2":           false,
		"::1":                 false,
		"10.1.2.3":            false,
		"172.16.0.1":          false,
		"172.31.255.255":      false,
		"172.32.0.1":          true,
		"192.168.1.1":         false,
		"169.254.169.254":     false,
		"fe80::1":             false,
		"fd00:ec2::254":       false,
		"fc00::1":             false,
		"100.64.0.1":          false,
		"100.127.255.255":     false,
		"100.128.0.1":         true,
		"0.0.0.0":             false,
		"::":                  false,
		"255.255.255.255":     false,
		"224.0.0.1":           false,
		"::ffff:10.0.0.1":     false,
		"::ffff:8.8.8.8":      true,
		"64:ff9b::a00:1":      false, // NAT64 of 10.0.0.1
		"64:ff9b::808:808":    true,
		"2002:a9fe:a9fe::1":   false, // 6to4 of 169.254.169.254
		"2002:808:808::1":     true,
		"::10.0.0.1":          false,
		"2001:0:4136:e378::1": false, // Teredo
		"198.18.0.1":          false,
		"fec0::1":             false,
		"ff02::1":             false,
	} {
		if got := egress.Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	g, err := egress.Parse("10.0.0.0/8, 127.0.0.1:5000 registry.Internal:5000\t192.168.7.7")
	if err != nil {
		t.Fatal(err)
	}
	for ap, want := range map[string]bool{
		"10.9.9.9:443":         true,
		"127.0.0.1:5000":       true,
		"127.0.0.1:5001":       false,
		"192.168.7.7:1":        true,
		"192.168.7.8:1":        false,
		"[::ffff:10.1.1.1]:80": true,
		"1.1.1.1:443":          true,
	} {
		if got := g.Allows(netip.MustParseAddrPort(ap)); got != want {
			t.Errorf("Allows(%s) = %v, want %v", ap, got, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "host", "host:0", "host:x", "[::1]", "a/b:80", "::1%000", "fe80::1%eth0", "[fe80::1%eth0]:5000"} {
		if _, err := egress.Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		} else if !strings.Contains(err.Error(), egress.EnvAllow) {
			t.Errorf("Parse(%q): %v does not name %s", bad, err, egress.EnvAllow)
		}
	}
}

// counting is a listener on addr that counts the connections it accepts.
func counting(t *testing.T, addr string) (net.Listener, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return l, &n
}

func TestDialRefusesWithoutConnecting(t *testing.T) {
	l, accepted := counting(t, "127.0.0.2:0")
	dial := egress.Allow("127.0.0.1/32").Dial(nil)
	_, err := dial(context.Background(), "tcp", l.Addr().String())
	if !egress.Refused(err) {
		t.Fatalf("dial %s: %v, want a refusal", l.Addr(), err)
	}
	if strings.Contains(err.Error(), "127.0.0.2") {
		t.Errorf("the refusal names the address: %v", err)
	}
	// Allowed by address and port, it connects.
	conn, err := egress.Allow(l.Addr().String()).Dial(nil)(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	waitFor(t, func() bool { return accepted.Load() == 1 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNameResolvingToPrivateAddressIsRefused(t *testing.T) {
	internal, accepted := counting(t, "127.0.0.2:0")
	_, port, _ := net.SplitHostPort(internal.Addr().String())
	dns := testenv.NewDNS(t, map[string][]netip.Addr{
		"registry.example.test": {netip.MustParseAddr("127.0.0.2")},
		"mixed.example.test":    {netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")},
	})
	g := egress.Allow("127.0.0.1/32").WithResolver(dns.Resolver())
	_, err := g.Dial(nil)(context.Background(), "tcp4", "registry.example.test:"+port)
	if !egress.Refused(err) {
		t.Fatalf("a name that resolves to 127.0.0.2: %v, want a refusal", err)
	}
	if strings.Contains(err.Error(), "127.0.0.2") || strings.Contains(err.Error(), "registry.example.test") {
		t.Errorf("the refusal names the target: %v", err)
	}
	// A name with an allowed and a refused address reaches only the allowed one.
	allowed, allowedAccepts := counting(t, "127.0.0.1:"+port)
	conn, err := g.Dial(nil)(context.Background(), "tcp4", "mixed.example.test:"+port)
	if err != nil {
		t.Fatalf("mixed: %v (allowed listener %s)", err, allowed.Addr())
	}
	conn.Close()
	waitFor(t, func() bool { return allowedAccepts.Load() == 1 })
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d connections reached 127.0.0.2", n)
	}
	// A name the allow-list trusts by name is dialled as it is.
	trusted := egress.Allow("registry.example.test:" + port).WithResolver(dns.Resolver())
	_, err = trusted.Dial(func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "registry.example.test:"+port {
			t.Errorf("dialled %s", addr)
		}
		return nil, io.EOF
	})(context.Background(), "tcp4", "registry.example.test:"+port)
	if err != io.EOF {
		t.Errorf("trusted name: %v", err)
	}
}

func TestRedirectToPrivateAddressIsRefused(t *testing.T) {
	internal := 0
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internal++
		io.WriteString(w, "db_password=hunter2")
	}))
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	target.Listener = l
	target.Start()
	defer target.Close()
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/secret", http.StatusFound)
	}))
	defer public.Close()

	g := egress.Allow("127.0.0.1/32")
	c := &http.Client{Transport: g.RoundTripper(g.Transport(http.DefaultTransport.(*http.Transport)))}
	resp, err := c.Get(public.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the redirect to %s was followed: %d", target.URL, resp.StatusCode)
	}
	if !egress.Refused(err) {
		t.Fatalf("redirect: %v, want a refusal", err)
	}
	if internal != 0 {
		t.Errorf("%d requests reached the internal server", internal)
	}
	// Through a proxy the target is not dialled here: its address literal is checked first.
	proxied := 0
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied++ }))
	defer proxy.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	proxyURL, _ := url.Parse(proxy.URL)
	tr.Proxy = http.ProxyURL(proxyURL)
	c = &http.Client{Transport: g.RoundTripper(g.Transport(tr))}
	if resp, err := c.Get(target.URL); !egress.Refused(err) {
		if err == nil {
			resp.Body.Close()
		}
		t.Errorf("through a proxy to %s: %v, want a refusal", target.URL, err)
	}
	if proxied != 0 {
		t.Errorf("%d requests reached the proxy", proxied)
	}
}
