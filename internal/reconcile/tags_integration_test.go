package reconcile_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestScanIntegrationLeavesOutInvalidTags(t *testing.T) {
	f := newScanFixture(t)
	ctx := context.Background()
	f.reg.Push(t, "app", "1.0.0")
	f.createRepo(t, "app")
	// The registry lists, besides 1.0.0, tags that its own API would refuse to serve: 10 kB, a
	// terminal escape, a right-to-left override, DEL, invalid UTF-8.
	page := `{"name":"app","tags":["1.0.0","` + strings.Repeat("9", 10_000) + `","\u001b[31m","1.0\u202e","1.0` + "\x7f" + `","1.0` + "\xff" + `"]}`
	f.reg.Inject(testenv.RegistryFault{Path: "/tags/list", Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: page})

	out, err := f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if out.TagCount != 1 || out.InvalidTags != 5 {
		t.Errorf("full scan: %+v", out)
	}
	entry, err := f.store.Get(ctx, reconcile.StoreKey(f.ns, "app"), f.identity(t, "app"))
	if err != nil || !slices.Equal(entry.Tags, []string{"1.0.0"}) {
		t.Fatalf("stored %q, %v; want 1.0.0 only", entry.Tags, err)
	}
	st := f.get(t, "app").Status
	ready := apimeta.FindStatusCondition(st.Conditions, v1.ReadyCondition)
	if ready == nil || !strings.HasPrefix(ready.Message, "successful scan: found 1 tags; left out 5 tags that are not valid tag names") ||
		!strings.HasSuffix(ready.Message, `such as "`+strings.Repeat("9", 64)+`"…`) {
		t.Errorf("Ready = %+v", ready)
	}
	if !slices.Equal(st.LastScanResult.LatestTags, []string{"1.0.0"}) {
		t.Errorf("latestTags %q", st.LastScanResult.LatestTags)
	}

	// A push hint naming an invalid tag beside a valid one: the valid one is confirmed and
	// added, the other is counted and never asked for.
	f.reg.Push(t, "app", "1.1.0")
	before := len(f.reg.Requests())
	out, err = f.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: f.ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{"1.1.0", "1.2\x1b[0m"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Incremental || out.TagCount != 2 || out.InvalidTags != 1 {
		t.Errorf("push scan: %+v", out)
	}
	if n := len(f.reg.Requests()) - before; n != 1 {
		t.Errorf("the push scan sent %d registry requests, want 1: the HEAD of 1.1.0", n)
	}
	entry, err = f.store.Get(ctx, reconcile.StoreKey(f.ns, "app"), f.identity(t, "app"))
	if err != nil || !slices.Equal(entry.Tags, []string{"1.0.0", "1.1.0"}) {
		t.Fatalf("stored %q, %v; want 1.0.0 and 1.1.0", entry.Tags, err)
	}
	ready = apimeta.FindStatusCondition(f.get(t, "app").Status.Conditions, v1.ReadyCondition)
	if ready == nil || !strings.HasSuffix(ready.Message, `left out 1 tag that is not a valid tag name (the distribution spec allows [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}), such as "1.2\x1b[0m"`) {
		t.Errorf("Ready = %+v", ready)
	}
}
