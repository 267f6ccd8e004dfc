package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
)

// fullScans returns the log lines of the scan function's scans of default/name that listed every
// tag.
func fullScans(t *testing.T, s *stack.Stack, name string) []string {
	t.Helper()
	f, err := os.Open(s.Log(stack.Scan))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg         string `json:"msg"`
			Namespace   string `json:"namespace"`
			Name        string `json:"name"`
			Incremental *bool  `json:"incremental"`
			Failure     string `json:"failure"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "scan" || line.Namespace != "default" || line.Name != name {
			continue
		}
		if line.Incremental != nil && !*line.Incremental && line.Failure == "" {
			out = append(out, sc.Text())
		}
	}
	return out
}

// TestPushesAreConfirmedIntegration pushes 100 tags one after another into docker-registry,
// whose notifications can arrive before the tag is readable: each is confirmed and added to the
// stored list, and none falls back to listing every tag.
func TestPushesAreConfirmedIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: time.Hour, NotifyBackoff: 200 * time.Millisecond})
	image := s.Registry + "/pushes/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(observedManifests, image))); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "stable", "1.0.0")
	first := len(fullScans(t, s, "app"))
	for i := 1; i <= 100; i++ {
		if _, err := stack.Push(fmt.Sprintf("%s:1.%d.0", image, i)); err != nil {
			t.Fatal(err)
		}
	}
	waitLatest(t, s, "stable", "1.100.0")
	if full := fullScans(t, s, "app")[first:]; len(full) != 0 {
		t.Errorf("%d full listings for 100 pushes, want 0:\n%s", len(full), strings.Join(full, "\n"))
	}
	r, err := s.Kube.Repositories.Get(ctx, "default", "app")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != 101 {
		t.Errorf("status %+v, want 101 tags", r.Status.LastScanResult)
	}
}
