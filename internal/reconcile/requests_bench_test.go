package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// BenchmarkRegistryRequestsPerPush counts, for each push to a repository of n tags that was
// scanned before, the registry requests of reflector's incremental path (a push event naming the
// tag: Scanner.Scan with a hint) and those of one full listing by a poller: reflector's own
// Prepare and ListTags, and go-containerregistry's remote.List, which is the call Flux's
// image-reflector-controller makes at every interval. The registry paginates at the page size
// each client asks for, 1,000 tags for both. Rate limiting is off: it changes when requests
// go out, not how many. ns/op is the incremental scan, status write included; the listings'
// times are the list-ms metrics, taken with the registry's pages already encoded.
func BenchmarkRegistryRequestsPerPush(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("tags=%d", n), func(b *testing.B) { benchRequestsPerPush(b, n) })
	}
}

func benchRequestsPerPush(b *testing.B, n int) {
	ctx := context.Background()
	env := testenv.Kube(b)
	c := env.Client(b)
	ns := env.Namespace(b)
	reg := testenv.NewRegistry(b)
	st := store.New(b.TempDir())
	b.Cleanup(func() { st.Close() })
	client := registry.New(registry.WithRateLimit(0, 0))
	scanner := &reconcile.Scanner{Kube: c, Registry: client, Store: st,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	reg.Push(b, "app", testenv.RegistryTags("v", n)...)
	repo, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.ImageRepositorySpec{Image: reg.Image("app"), Interval: metav1.Duration{Duration: 5 * time.Minute},
			Insecure: true},
	})
	if err != nil {
		b.Fatal(err)
	}
	if out, err := scanner.Scan(ctx, reconcile.ScanRequest{Namespace: ns, Name: "app"}); err != nil || out.TagCount != n {
		b.Fatalf("first scan: %+v, %v", out, err)
	}
	ref, err := name.NewRepository(reg.Image("app"), name.Insecure)
	if err != nil {
		b.Fatal(err)
	}

	var incremental, listing, flux, pages int
	var listTime, fluxTime time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		tag := fmt.Sprintf("w-%07d", i+1)
		want := n + i + 1
		reg.Push(b, "app", tag)
		before := reg.RequestCount()
		b.StartTimer()
		out, err := scanner.Scan(ctx, reconcile.ScanRequest{Namespace: ns, Name: "app", Hint: &reconcile.Hint{Tags: []string{tag}}})
		b.StopTimer()
		if err != nil || !out.Incremental || out.TagCount != want {
			b.Fatalf("push %d: %+v, %v", i, out, err)
		}
		incremental += reg.RequestCount() - before
		// The push emptied the registry's cache of encoded pages; refill it, so that neither
		// listing below pays for the registry's own work.
		if _, err := remote.List(ref, remote.WithContext(ctx)); err != nil {
			b.Fatal(err)
		}

		before = reg.RequestCount()
		start := time.Now()
		sc, err := client.Prepare(ctx, c, repo)
		if err != nil {
			b.Fatal(err)
		}
		res, err := sc.ListTags(ctx)
		sc.Close()
		listTime += time.Since(start)
		if err != nil || len(res.Tags) != want {
			b.Fatalf("listing after push %d: %d tags, %v", i, len(res.Tags), err)
		}
		listing += reg.RequestCount() - before
		pages = res.Pages

		before = reg.RequestCount()
		start = time.Now()
		tags, err := remote.List(ref, remote.WithContext(ctx))
		fluxTime += time.Since(start)
		if err != nil || len(tags) != want {
			b.Fatalf("remote.List after push %d: %d tags, %v", i, len(tags), err)
		}
		flux += reg.RequestCount() - before
		b.StartTimer()
	}
	b.StopTimer()
	per := func(v int) float64 { return float64(v) / float64(b.N) }
	b.ReportMetric(per(incremental), "incremental-req/push")
	b.ReportMetric(per(listing), "listing-req/scan")
	b.ReportMetric(per(flux), "flux-list-req/scan")
	b.ReportMetric(float64(pages), "pages")
	b.ReportMetric(float64(listTime.Microseconds())/1000/float64(b.N), "listing-ms/scan")
	b.ReportMetric(float64(fluxTime.Microseconds())/1000/float64(b.N), "flux-list-ms/scan")
}
