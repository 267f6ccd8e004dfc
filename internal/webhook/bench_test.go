package webhook

import "testing"

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
	for _, bm := range []struct{ name, ceType, ceSource string }{
		{"cdevents", "dev.cdevents.artifact.published.0.2.0", "/event/source/123"},
		{"eventgrid", EventGridImagePushed, "/subscriptions/s/resourceGroups/g/providers/Microsoft.ContainerRegistry/registries/demo"},
		{"eventarc", EventarcMessagePublished, "//pubsub.googleapis.com/projects/my-project/topics/gcr"},
	} {
		data := load(b, bm.name)
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
