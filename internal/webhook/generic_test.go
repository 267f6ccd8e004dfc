package webhook

import "testing"

func TestGeneric(t *testing.T) {
	body := load(t, "generic")
	const digest = "sha256:6ec128e26cd5d9f1c5e4b4c1c4b8b1c6e5ff6c7b0f2e3d4a5b6c7d8e9f0a1b2c"
	want := Event{Host: "ghcr.io", Repository: "example/app", Tag: "v1.2.3", Digest: digest, DeliveryID: bodyID(body), Source: "generic"}
	event := func(body, host, repository, tag string) Event {
		return Event{Host: host, Repository: repository, Tag: tag, DeliveryID: bodyID([]byte(body)), Source: "generic"}
	}
	const (
		shortName = `{"image": "alpine", "tag": "3.20"}`
		tagged    = `{"image": "registry.local:5000/team/app:v2"}`
		untagged  = `{"image": "ghcr.io/example/app"}`
	)

	cases := authCases("generic", body, want)
	cases = append(cases, []parseCase{
		{name: "Docker Hub short name", req: signed("generic", []byte(shortName)), want: []Event{event(shortName, "docker.io", "library/alpine", "3.20")}},
		{name: "tag in the image", req: signed("generic", []byte(tagged)), want: []Event{event(tagged, "registry.local:5000", "team/app", "v2")}},
		{name: "no tag asks for a scan", req: signed("generic", []byte(untagged)), want: []Event{event(untagged, "ghcr.io", "example/app", "")}},
		{name: "conflicting tags", req: signed("generic", []byte(`{"image": "ghcr.io/example/app:v1", "tag": "v2"}`)), err: ErrMalformed},
		{name: "no image", req: signed("generic", []byte(`{"tag": "v1"}`)), err: ErrMalformed},
		{name: "invalid image", req: signed("generic", []byte(`{"image": "Bad Name"}`)), err: ErrMalformed},
	}...)
	runParse(t, "generic", cases)
}
