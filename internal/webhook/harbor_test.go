package webhook

import "testing"

func TestHarbor(t *testing.T) {
	body := load(t, "harbor")
	const digest = "sha256:8a9e9863dbb6e10edb5adfe917c00da84e1700fa76e7ed02476aa6e6fb8ee0d8"
	want := Event{Host: "hub.harbor.com", Repository: "test-webhook/debian", Tag: "latest", Digest: digest, DeliveryID: bodyID(body), Source: "harbor"}

	resource := `{
        "digest": "sha256:8a9e9863dbb6e10edb5adfe917c00da84e1700fa76e7ed02476aa6e6fb8ee0d8",
        "tag": "latest",
        "resource_url": "hub.harbor.com/test-webhook/debian:latest"
      }`
	several := edit(t, body, resource, resource+`,
      {"digest": "`+digest+`", "tag": "12.5", "resource_url": "hub.harbor.com/test-webhook/debian:12.5"},
      {"digest": "`+digest+`", "tag": "`+digest+`", "resource_url": "hub.harbor.com/test-webhook/debian@`+digest+`"}`)
	byDigest := edit(t, body, `"tag": "latest"`, `"tag": "`+digest+`"`)

	cases := authCases("harbor", body, want)
	cases = append(cases, []parseCase{
		{name: "bare token", req: signed("harbor", body, header("Authorization", string(testSecret))), want: []Event{want}},
		{
			name: "several tags",
			req:  signed("harbor", several),
			want: []Event{
				{Host: "hub.harbor.com", Repository: "test-webhook/debian", Tag: "latest", Digest: digest, DeliveryID: bodyID(several), Source: "harbor"},
				{Host: "hub.harbor.com", Repository: "test-webhook/debian", Tag: "12.5", Digest: digest, DeliveryID: bodyID(several), Source: "harbor"},
			},
		},
		{
			name: "Harbor 1.x pushImage",
			req:  signed("harbor", edit(t, body, "PUSH_ARTIFACT", "pushImage")),
			want: []Event{{Host: "hub.harbor.com", Repository: "test-webhook/debian", Tag: "latest", Digest: digest, DeliveryID: bodyID(edit(t, body, "PUSH_ARTIFACT", "pushImage")), Source: "harbor"}},
		},
		{name: "pull", req: signed("harbor", edit(t, body, "PUSH_ARTIFACT", "PULL_ARTIFACT")), err: ErrIgnored},
		{name: "delete", req: signed("harbor", edit(t, body, "PUSH_ARTIFACT", "DELETE_ARTIFACT")), err: ErrIgnored},
		{name: "scan completed", req: signed("harbor", edit(t, body, "PUSH_ARTIFACT", "SCANNING_COMPLETED")), err: ErrIgnored},
		{name: "pushed by digest", req: signed("harbor", byDigest), err: ErrIgnored},
		{name: "no resource_url", req: signed("harbor", edit(t, body, `"resource_url": "hub.harbor.com/test-webhook/debian:latest"`, `"resource_url": ""`)), err: ErrMalformed},
	}...)
	runParse(t, "harbor", cases)
}
