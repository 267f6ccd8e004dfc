package receiver_test

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/testenv"
)

// distributionPush is a distribution notification of one tag push, with its own event id.
func distributionPush(id, host, repo, tag string) []byte {
	return fmt.Appendf(nil, `{"events":[{"id":%q,"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":%q,"tag":%q},"request":{"host":%q}}]}`,
		id, repo, tag, host)
}

// reportLatencies reports the p50 and p99 of ds in milliseconds.
func reportLatencies(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	pct := func(p float64) float64 {
		return float64(ds[min(len(ds)-1, int(float64(len(ds))*p))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkWebhookAnswer measures the time from sending a delivery to its 202 with 10
// matching ImageRepositories: authenticate, list, annotate 10 objects. The scans run in the
// background and are not waited for.
func BenchmarkWebhookAnswer(b *testing.B) {
	f := newFixture(b, receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(b, token)
	f.reg.Push(b, "bench/answer", "1.0.0")
	for i := range 10 {
		f.createRepo(b, ns, fmt.Sprintf("app-%d", i), f.reg.Image("bench/answer"))
	}
	path := "/hook/distribution/" + ns
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d := signed("distribution", path, token, distributionPush(fmt.Sprintf("answer-%d", i), f.reg.Host(), "bench/answer", "1.0.0"))
		start := time.Now()
		code, a := f.send(b, d)
		ds = append(ds, time.Since(start))
		if code != http.StatusAccepted || len(a.Objects) != 10 {
			b.Fatalf("%d %+v", code, a)
		}
	}
	b.StopTimer()
	reportLatencies(b, ds)
}

// BenchmarkPushToStatus measures the time from a push's webhook to the pushed tag in the
// ImageRepository's status, through the incremental path, and the registry requests each push
// costs.
func BenchmarkPushToStatus(b *testing.B) {
	f := newFixture(b, receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(b, token)
	f.reg.Push(b, "bench/push", "0.0.0")
	f.createRepo(b, ns, "app", f.reg.Image("bench/push"))
	if _, err := f.scanner.Scan(b.Context(), reconcile.ScanRequest{Namespace: ns, Name: "app"}); err != nil {
		b.Fatal(err)
	}
	path := "/hook/distribution/" + ns
	var ds []time.Duration
	requests, listings := 0, 0
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		tag := fmt.Sprintf("1.0.%d", i)
		f.reg.Push(b, "bench/push", tag)
		beforeReq, beforeList := len(f.reg.Requests()), f.tagListings("")
		b.StartTimer()
		start := time.Now()
		if code, a := f.send(b, signed("distribution", path, token, distributionPush("push-"+tag, f.reg.Host(), "bench/push", tag))); code != http.StatusAccepted {
			b.Fatalf("%d %+v", code, a)
		}
		// Checks every 2 ms: the resolution of the measured latency.
		testenv.EventuallyEvery(b, 30*time.Second, 2*time.Millisecond, func() error {
			r := f.get(b, ns, "app")
			if r.Status.LastScanResult == nil || !slices.Contains(r.Status.LastScanResult.LatestTags, tag) {
				return fmt.Errorf("%s not scanned yet: %+v", tag, r.Status.LastScanResult)
			}
			return nil
		})
		ds = append(ds, time.Since(start))
		requests += len(f.reg.Requests()) - beforeReq
		listings += f.tagListings("") - beforeList
	}
	b.StopTimer()
	reportLatencies(b, ds)
	b.ReportMetric(float64(requests)/float64(b.N), "registry-req/push")
	b.ReportMetric(float64(listings)/float64(b.N), "tag-lists/push")
}

// BenchmarkFullListing is the comparison for BenchmarkPushToStatus: the registry requests of a
// full scan of a repository with 1,000 tags.
func BenchmarkFullListing(b *testing.B) {
	f := newFixture(b)
	ns := f.namespace(b, "")
	f.reg.Push(b, "bench/full", testenvTags(1000)...)
	f.createRepo(b, ns, "app", f.reg.Image("bench/full"))
	before := len(f.reg.Requests())
	b.ResetTimer()
	for b.Loop() {
		out, err := f.scanner.Scan(b.Context(), reconcile.ScanRequest{Namespace: ns, Name: "app"})
		if err != nil || out.TagCount != 1000 {
			b.Fatalf("%+v %v", out, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(f.reg.Requests())-before)/float64(b.N), "registry-req/scan")
}

func testenvTags(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("1.%d.0", i)
	}
	return tags
}
