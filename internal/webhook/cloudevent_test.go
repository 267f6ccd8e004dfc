package webhook

import (
	"testing"
)

func TestParseCloudEvent(t *testing.T) {
	cdevent := load(t, "cdevents")
	eventgrid := load(t, "eventgrid-data")
	eventarc := load(t, "eventarc")
	const (
		cdType    = "dev.cdevents.artifact.published.0.2.0"
		gcrTopic  = "//pubsub.googleapis.com/projects/my-project/topics/gcr"
		ociPURL   = "pkg:oci/myapp@sha256%3A0b31b1c02ff458ad9b7b81cbdf8f028bd54699fa151f221d1e8de6817db93427?repository_url=mycr.io/myorg/myapp&tag=v0.1.0"
		cdDigest  = "sha256:0b31b1c02ff458ad9b7b81cbdf8f028bd54699fa151f221d1e8de6817db93427"
		garDigest = "sha256:6ec128e26cd5d9f1c5e4b4c1c4b8b1c6e5ff6c7b0f2e3d4a5b6c7d8e9f0a1b2c"
	)
	withPURL := func(purl string) []byte { return edit(t, cdevent, ociPURL, purl) }

	tests := []struct {
		name, ceType, ceSource, ceID string
		data                         []byte
		want                         []Event
		err                          error
	}{
		{
			name: "CDEvents OCI artifact", ceType: cdType, ceID: "ce-1", data: cdevent,
			want: []Event{{Host: "mycr.io", Repository: "myorg/myapp", Tag: "v0.1.0", Digest: cdDigest, DeliveryID: "ce-1", Source: "cdevents"}},
		},
		{
			name: "CDEvents without a tag", ceType: "dev.cdevents.artifact.published.0.1.1", data: withPURL("pkg:oci/static@sha256%3A0b31b1c02ff458ad9b7b81cbdf8f028bd54699fa151f221d1e8de6817db93427?repository_url=gcr.io/distroless/static"),
			want: []Event{{Host: "gcr.io", Repository: "distroless/static", Digest: cdDigest, DeliveryID: "271069a8-fc18-44f1-b38f-9d70a1695819", Source: "cdevents"}},
		},
		{name: "CDEvents Go module (the spec's example)", ceType: cdType, data: withPURL("pkg:golang/mygit.com/myorg/myapp@234fd47e07d1004f0aed9c"), err: ErrIgnored},
		{name: "CDEvents without repository_url", ceType: cdType, data: withPURL("pkg:oci/hello-wasm@sha256%3A244fd47e07d10?tag=v1"), err: ErrIgnored},
		{name: "CDEvents subject not a purl", ceType: cdType, data: withPURL("artifact-123"), err: ErrMalformed},
		{name: "CDEvents invalid registry", ceType: cdType, data: withPURL("pkg:oci/app?repository_url=app&tag=v1"), err: ErrMalformed},
		{name: "CDEvents malformed data", ceType: cdType, data: []byte(`{"subject": 1}`), err: ErrMalformed},
		{
			name: "Event Grid ImagePushed", ceType: EventGridImagePushed, ceID: "831e1650", data: eventgrid,
			want: []Event{{Host: "demo.azurecr.io", Repository: "group1/testrepo", Tag: "v1", Digest: "sha256:213b0e4a67bd9e7e7c0b6e8ba7b5e5a5d8b1c1e6f33e4c0f1e1d6e6b9e2f7a3c", DeliveryID: "831e1650", Source: "eventgrid"}},
		},
		{name: "Event Grid ImageDeleted", ceType: "Microsoft.ContainerRegistry.ImageDeleted", data: eventgrid, err: ErrIgnored},
		{name: "Event Grid malformed data", ceType: EventGridImagePushed, data: []byte("<xml/>"), err: ErrMalformed},
		{
			name: "Eventarc gcr topic", ceType: EventarcMessagePublished, ceSource: gcrTopic, ceID: "ce-2", data: eventarc,
			want: []Event{{Host: "us-east1-docker.pkg.dev", Repository: "my-project/my-repo/hello-world", Tag: "1.1", Digest: garDigest, DeliveryID: "2070443601311541", Source: "eventarc"}},
		},
		{name: "Eventarc other topic", ceType: EventarcMessagePublished, ceSource: "//pubsub.googleapis.com/projects/my-project/topics/orders", data: eventarc, err: ErrIgnored},
		{name: "Eventarc malformed data", ceType: EventarcMessagePublished, ceSource: gcrTopic, data: []byte(`{"message": []}`), err: ErrMalformed},
		{name: "unrelated type", ceType: "dev.knative.apiserver.resource.update", data: []byte(`{}`), err: ErrIgnored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCloudEvent(tt.ceType, tt.ceSource, tt.ceID, tt.data)
			checkResult(t, got, err, tt.want, tt.err)
		})
	}
}
