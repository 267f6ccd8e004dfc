package receiver

import (
	"strings"
	"testing"
)

func TestParseRoute(t *testing.T) {
	cases := []struct {
		path string
		want route
		ok   bool
	}{
		{"/hook/github", route{provider: "github"}, true},
		{"/hook/github/team-a", route{provider: "github", namespace: "team-a"}, true},
		{"/hook/", route{}, false},
		{"/hook", route{}, false},
		{"/hook//team-a", route{}, false},
		{"/hook/github/", route{}, false},
		{"/hook/github/Team_A", route{}, false},
		{"/hook/github/team-a/x", route{}, false},
		{"/hooks/github", route{}, false},
	}
	for _, tc := range cases {
		got, ok := parseRoute(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRoute(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseRoute: a path names a receiver only if it is exactly /hook/<provider>[/<namespace>]
// with a DNS-label namespace.
func FuzzParseRoute(f *testing.F) {
	for _, p := range []string{"/hook/github", "/hook/harbor/team-a", "/hook//x", "/hook/a/b/c", "/hook/a/../b"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		rt, ok := parseRoute(path)
		if !ok {
			return
		}
		want := hookPrefix + rt.provider
		if rt.namespace != "" {
			want += "/" + rt.namespace
		}
		if want != path || rt.provider == "" || strings.Contains(rt.provider, "/") {
			t.Fatalf("parseRoute(%q) = %+v", path, rt)
		}
		if strings.ContainsAny(rt.namespace, "./_") || strings.ToLower(rt.namespace) != rt.namespace {
			t.Fatalf("namespace %q accepted", rt.namespace)
		}
	})
}
