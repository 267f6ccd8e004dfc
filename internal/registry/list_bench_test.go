package registry_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/imagereflector/reflector/internal/testenv"
)

// BenchmarkIntegrationScan measures a whole scan (Prepare's ping, then every page) of a local
// registry. requests/op should be pages+1 and B/op grow linearly with the tag count; the
// registry's pages are encoded once and cached, so its share of B/op is the HTTP serving only.
func BenchmarkIntegrationScan(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("tags=%d", n), func(b *testing.B) {
			reg := testenv.NewRegistry(b)
			reg.Push(b, "app", testenv.RegistryTags("v", n)...)
			c := fast()
			obj := imageRepository("default", reg.Image("app"))
			ctx := context.Background()
			pages := 0
			b.ReportAllocs()
			before := reg.RequestCount()
			for b.Loop() {
				s, err := c.Prepare(ctx, nil, obj)
				if err != nil {
					b.Fatal(err)
				}
				res, err := s.ListTags(ctx)
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
				if len(res.Tags) != n {
					b.Fatalf("%d tags, want %d", len(res.Tags), n)
				}
				pages = res.Pages
			}
			b.ReportMetric(float64(reg.RequestCount()-before)/float64(b.N), "requests/op")
			b.ReportMetric(float64(pages), "pages")
		})
	}
}
