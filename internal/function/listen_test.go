package function

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/testenv"
)

func TestParseActivation(t *testing.T) {
	const pid = 4242
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    map[string]int
		wantErr string
	}{
		{name: "nothing passed", env: map[string]string{}},
		{name: "meant for another process", env: map[string]string{"LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "policy"}},
		{name: "no count", env: map[string]string{"LISTEN_PID": "4242"}, wantErr: "LISTEN_FDS"},
		{name: "zero", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "0"}},
		{name: "one", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "policy"},
			want: map[string]int{"policy": 3}},
		{name: "three in order", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "3", "LISTEN_FDNAMES": "webhooks:cloudevents:metrics"},
			want: map[string]int{"webhooks": 3, "cloudevents": 4, "metrics": 5}},
		{name: "negative", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "-1"}, wantErr: "LISTEN_FDS"},
		{name: "not a number", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "two"}, wantErr: "LISTEN_FDS"},
		{name: "unnamed", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "1"}, wantErr: "LISTEN_FDNAMES is required"},
		{name: "fewer names", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "policy"}, wantErr: "names 1 file descriptors, LISTEN_FDS passes 2"},
		{name: "empty name", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "policy:"}, wantErr: "file descriptor 4 has no name"},
		{name: "same name twice", env: map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "policy:policy"}, wantErr: `"policy" names two`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseActivation(func(k string) string { return tc.env[k] }, pid)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// listenChildEnv makes the test binary the child process of TestListenInherits.
const listenChildEnv = "REFLECTOR_TEST_LISTEN_CHILD"

// TestListenChild is the process that TestListenInherits starts: it takes the listener named
// "policy" (its fallback address, the listener's own, cannot be bound again), answers one connection with the environment
// it has left, and exits.
func TestListenChild(t *testing.T) {
	addr := os.Getenv(listenChildEnv)
	if addr == "" {
		t.Skip("the child process of TestListenInherits")
	}
	l, err := Listen("policy", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if other, err := Listen("metrics", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	} else {
		other.Close()
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "LISTEN_PID=%s LISTEN_FDS=%s", os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"))
}

// TestListenInherits passes a bound listener to a process the way socket activation does and
// checks that the process serves on it rather than binding its own, and hides the activation
// variables from processes it may start.
func TestListenInherits(t *testing.T) {
	l := testenv.Listener(t)
	unused := testenv.Listener(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestListenChild$")
	cmd.Env = append(os.Environ(), listenChildEnv+"="+l.Addr().String())
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := testenv.StartWithListeners(cmd, testenv.Socket{Name: "unused", Listener: unused}, testenv.Socket{Name: "policy", Listener: l}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if want := "LISTEN_PID= LISTEN_FDS="; string(got) != want {
		t.Errorf("the child answered %q, want %q", got, want)
	}
}
