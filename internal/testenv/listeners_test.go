package testenv

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
)

func TestProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:01BB":                         "0.0.0.0:443",
		"00000000000000000000000001000000:0050": "[::1]:80",
		"0000000000000000FFFF00000100007F:2328": "[::ffff:127.0.0.1]:9000",
	} {
		got, err := procAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("procAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "01007F:1F90", "0100007F:XYZ", "zz00007F:1F90"} {
		if _, err := procAddr(bad); err == nil {
			t.Errorf("procAddr(%q) succeeded", bad)
		}
	}
}

func TestListenersOfThisProcess(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addrs, err := Listeners(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := l.Addr().(*net.TCPAddr).AddrPort()
	if !slices.Contains(addrs, want) {
		t.Fatalf("Listeners = %v, want it to hold %s", addrs, want)
	}
	if bad := NonLoopback(addrs); len(bad) > 0 {
		t.Fatalf("NonLoopback = %v, want none", bad)
	}
	if got := NonLoopback([]netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:80"), want}); len(got) != 1 {
		t.Fatalf("NonLoopback kept %v", got)
	}
}
