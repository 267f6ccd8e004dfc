package testenv

import (
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// RegistryProxy is a forward HTTP proxy on 127.0.0.1 for tests of registry access through a
// proxy: CONNECT tunnels for HTTPS and absolute-URI forwarding for plain HTTP, behind basic
// proxy authentication. It records what it served.
type RegistryProxy struct {
	srv                *httptest.Server
	username, password string

	mu       sync.Mutex
	served   []string
	refused  int
	conns    []net.Conn
	closed   bool
	tunnels  sync.WaitGroup
	forwards *httputil.ReverseProxy
	routes   map[string]string
}

// Route makes the proxy tunnel CONNECT requests for host:port to addr, a loopback address, so
// that a client reaches a test server under a real host name. Once a route is set, the proxy
// refuses tunnels to any other name that is not a loopback address: tests never reach out.
func (p *RegistryProxy) Route(hostport, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.routes == nil {
		p.routes = map[string]string{}
	}
	p.routes[hostport] = addr
}

// target returns where a tunnel to hostport goes, or false when it may not go anywhere.
func (p *RegistryProxy) target(hostport string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if addr, ok := p.routes[hostport]; ok {
		return addr, true
	}
	if p.routes == nil {
		return hostport, true
	}
	host, _, err := net.SplitHostPort(hostport)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return "", false
	}
	return hostport, true
}

// NewRegistryProxy starts a proxy that requires the given credentials (none if both are
// empty) and stops it when the test ends.
func NewRegistryProxy(t testing.TB, username, password string) *RegistryProxy {
	t.Helper()
	p := &RegistryProxy{username: username, password: password}
	p.forwards = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.Out.Header.Del("Proxy-Authorization")
	}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.close)
	return p
}

// URL returns the proxy's address, http://127.0.0.1:port, without credentials.
func (p *RegistryProxy) URL() string { return p.srv.URL }

// Served returns what the proxy carried, in order: "CONNECT host:port" for each tunnel and
// "METHOD url" for each forwarded request.
func (p *RegistryProxy) Served() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.served)
}

// Refused returns how many requests the proxy refused for missing or wrong credentials.
func (p *RegistryProxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *RegistryProxy) serve(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		p.mu.Lock()
		p.refused++
		p.mu.Unlock()
		w.Header().Set("Proxy-Authenticate", `Basic realm="testenv proxy"`)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	if r.Method != http.MethodConnect {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		if addr, ok := p.target(r.URL.Host); !ok || addr != r.URL.Host {
			http.Error(w, "no route to "+r.URL.Host+" from the test proxy", http.StatusBadGateway)
			return
		}
		p.log(r.Method + " " + r.URL.String())
		p.forwards.ServeHTTP(w, r)
		return
	}
	addr, ok := p.target(r.Host)
	if !ok {
		http.Error(w, "no route to "+r.Host+" from the test proxy", http.StatusBadGateway)
		return
	}
	upstream, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	client, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if !p.track(client, upstream) {
		return
	}
	p.log("CONNECT " + r.Host)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	p.tunnels.Add(2)
	pipe := func(dst, src net.Conn) {
		defer p.tunnels.Done()
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
}

// authorized checks the Proxy-Authorization header.
func (p *RegistryProxy) authorized(r *http.Request) bool {
	if p.username == "" && p.password == "" {
		return true
	}
	scheme, encoded, ok := strings.Cut(r.Header.Get("Proxy-Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	return err == nil && string(raw) == p.username+":"+p.password
}

func (p *RegistryProxy) log(entry string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.served = append(p.served, entry)
}

// track remembers a tunnel's connections so that close can end them: the test server does not
// know hijacked connections.
func (p *RegistryProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

func (p *RegistryProxy) close() {
	p.srv.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.tunnels.Wait()
}
