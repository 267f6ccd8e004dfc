package function

import (
	"strings"
	"testing"
	"time"
)

func TestReleaseEvery(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"": DefaultReleaseEvery, "off": 0, "0": 0, "10s": 10 * time.Second, "nonsense": DefaultReleaseEvery, "-1s": DefaultReleaseEvery,
	} {
		if got := ReleaseEvery(func(string) string { return v }); got != want {
			t.Errorf("%s=%q: %v, want %v", ReleaseEveryEnv, v, got, want)
		}
	}
}

// TestReleaseExecutable drops the test binary's own clean pages and goes on running code
// and reading tables from them.
func TestReleaseExecutable(t *testing.T) {
	for range 3 {
		n, err := releaseExecutable()
		if err != nil {
			t.Fatal(err)
		}
		if n <= 0 {
			t.Fatalf("released %d bytes of the executable", n)
		}
		if got := strings.ToUpper(strings.Repeat("ab", 3)); got != "ABABAB" {
			t.Fatalf("after the release: %q", got)
		}
	}
}
