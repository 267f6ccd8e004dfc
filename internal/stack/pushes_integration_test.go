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

	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/stack"
)

// fullScans returns the log lines of the scan function's scans of default/name that listed every
// tag.
func fullScans(t testing.TB, s *stack.Stack, name string) []string {
	return listings(t, s, name, "")
}

// listings returns the log lines of the scan function's scans of default/name that listed every
// tag for the reason why (reconcile.ScanOutcome.Listing), or for any reason when why is empty.
func listings(t testing.TB, s *stack.Stack, name, why string) []string {
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
			Listing     string `json:"listing"`
			Failure     string `json:"failure"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "scan" || line.Namespace != "default" || line.Name != name {
			continue
		}
		if line.Incremental != nil && !*line.Incremental && line.Failure == "" && (why == "" || line.Listing == why) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// TestPushesAreConfirmedIntegration pushes 100 tags one after another into docker-registry,
// whose notifications can arrive before the tag is readable: each is confirmed and added to the
// stored list, or listed when pushes arrived during a scan and a listing of the repository's
// 101 tags costs fewer requests than confirming them; none falls back to listing every tag
// because a pushed tag could not be confirmed.
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
	first := len(listings(t, s, "app", reconcile.ListingUnconfirmed))
	cheaper := len(listings(t, s, "app", reconcile.ListingCheaper))
	for i := 1; i <= 100; i++ {
		if _, err := stack.Push(fmt.Sprintf("%s:1.%d.0", image, i)); err != nil {
			t.Fatal(err)
		}
	}
	waitLatest(t, s, "stable", "1.100.0")
	if full := listings(t, s, "app", reconcile.ListingUnconfirmed)[first:]; len(full) != 0 {
		t.Errorf("%d listings after an unconfirmed push, want 0:\n%s", len(full), strings.Join(full, "\n"))
	}
	t.Logf("%d listings cheaper than confirming the pushes that arrived during a scan",
		len(listings(t, s, "app", reconcile.ListingCheaper))-cheaper)
	r, err := s.Kube.Repositories.Get(ctx, "default", "app")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != 101 {
		t.Errorf("status %+v, want 101 tags", r.Status.LastScanResult)
	}
}
