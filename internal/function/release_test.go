package function

import (
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
