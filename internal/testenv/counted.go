package testenv

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// ServeCounted serves h over HTTP on a listener of its own at addr (host:port, port 0 for any)
// until the test ends, and returns its address and the number of connections it has accepted,
// so that a test can tell that nothing connected at all, not merely that no request arrived.
func ServeCounted(t testing.TB, addr string, h http.Handler) (host string, accepted *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int32)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = countingListener{l, accepted}
	srv.Start()
	t.Cleanup(srv.Close)
	return l.Addr().String(), accepted
}

type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
