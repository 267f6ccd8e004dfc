package webhook

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParse measures verifying and parsing each provider's documented payload.
func BenchmarkParse(b *testing.B) {
	for _, provider := range Providers() {
		req := signed(provider, load(b, provider))
		b.Run(provider, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(req.Body)))
			for b.Loop() {
				if _, err := Parse(provider, req, testSecret); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseCloudEvent measures parsing each registry CloudEvent's documented data.
func BenchmarkParseCloudEvent(b *testing.B) {
	for _, bm := range []struct{ name, file, ceType, ceSource string }{
		{"cdevents", "cdevents", "dev.cdevents.artifact.published.0.2.0", "/event/source/123"},
		{"eventgrid", "eventgrid-data", EventGridImagePushed, "/subscriptions/s/resourceGroups/g/providers/Microsoft.ContainerRegistry/registries/demo"},
		{"eventarc", "eventarc", EventarcMessagePublished, "//pubsub.googleapis.com/projects/my-project/topics/gcr"},
	} {
		data := load(b, bm.file)
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := ParseCloudEvent(bm.ceType, bm.ceSource, "id", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// largeEnvelope returns a distribution envelope of about size bytes made of manifest
// pushes without an id, each to a tag of its own, and how many events it holds.
func largeEnvelope(size int) ([]byte, int) {
	var b strings.Builder
	b.WriteString(`{"events":[`)
	n := 0
	for b.Len() < size-200 {
		if n > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"action":"push","target":{"repository":"app","tag":"t%d"},"request":{"host":"r"}}`, n)
		n++
	}
	b.WriteString(`]}`)
	return []byte(b.String()), n
}

// BenchmarkParseLargeEnvelope measures a 1 MiB distribution envelope of events without ids,
// the worst case a sender with the token can post: parsing is linear in the body.
func BenchmarkParseLargeEnvelope(b *testing.B) {
	body, n := largeEnvelope(1 << 20)
	req := signed("distribution", body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		evs, err := Parse("distribution", req, testSecret)
		if err != nil || len(evs) != n {
			b.Fatalf("%d events, want %d: %v", len(evs), n, err)
		}
	}
	b.ReportMetric(float64(n), "events/op")
}

// BenchmarkParseEventGridBatch measures the largest Event Grid batch accepted,
// MaxEventGridBatch pushes of one repository each to a tag of its own.
func BenchmarkParseEventGridBatch(b *testing.B) {
	var sb strings.Builder
	sb.WriteByte('[')
	for i := range MaxEventGridBatch {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"specversion":"1.0","id":"e-%d","source":"/subscriptions/s","type":%q,"data":{"action":"push","target":{"repository":"apps/api","tag":"v%d"},"request":{"host":"demo.azurecr.io"}}}`, i, EventGridImagePushed, i)
	}
	sb.WriteByte(']')
	req := signed("eventgrid", []byte(sb.String()))
	b.ReportAllocs()
	b.SetBytes(int64(len(req.Body)))
	for b.Loop() {
		if evs, err := Parse("eventgrid", req, testSecret); err != nil || len(evs) != MaxEventGridBatch {
			b.Fatalf("%d events: %v", len(evs), err)
		}
	}
}
