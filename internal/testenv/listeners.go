package testenv

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Listeners returns the TCP addresses that process pid listens on, read from Linux's /proc: the
// socket inodes among the process's open files, looked up in /proc/<pid>/net/tcp and tcp6.
func Listeners(pid int) ([]netip.AddrPort, error) {
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var addrs []netip.AddrPort
	for _, table := range []string{"tcp", "tcp6"} {
		found, err := listening(filepath.Join("/proc", strconv.Itoa(pid), "net", table), inodes)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		addrs = append(addrs, found...)
	}
	return addrs, nil
}

// NonLoopback returns the addresses of addrs that are reachable from outside the host.
func NonLoopback(addrs []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range addrs {
		if !a.Addr().Unmap().IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}

// listening parses a /proc/net/tcp table and returns the local addresses of the sockets in
// state LISTEN (0A) whose inode is in inodes.
func listening(path string, inodes map[string]bool) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var addrs []netip.AddrPort
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
			continue
		}
		a, err := procAddr(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		addrs = append(addrs, a)
	}
	return addrs, sc.Err()
}

// procAddr decodes "0100007F:1F90": the address as the kernel stores it, in 32-bit words of host
// byte order (little-endian on the machines this runs on), and the port in hex.
func procAddr(s string) (netip.AddrPort, error) {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(host)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port in %q", s)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr, uint16(p)), nil
}

// ExposedListeners returns, for every process the environment runs (etcd, kube-apiserver and
// what StartKnative started), the addresses it listens on outside loopback. Tests bind
// 127.0.0.1 only, and so must the programs they start: an empty answer shows that they do.
func (e *Env) ExposedListeners() (map[string][]netip.AddrPort, error) {
	exposed := map[string][]netip.AddrPort{}
	for _, p := range append(slices.Clone(e.procs), e.programs...) {
		addrs, err := Listeners(p.cmd.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		if bad := NonLoopback(addrs); len(bad) > 0 {
			exposed[fmt.Sprintf("%s (%s, pid %d)", p.name, p.cmd.Path, p.cmd.Process.Pid)] = bad
		}
	}
	return exposed, nil
}
