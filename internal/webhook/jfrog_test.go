package webhook

import "testing"

func TestJFrog(t *testing.T) {
	body := load(t, "jfrog")
	want := Event{
		Host: "example.jfrog.io", Repository: "docker-remote-cache/library/ubuntu", Tag: "latest",
		Digest:     "sha256:35c4a2c15539c6c1e4e5fa4e554dac323ad0107d8eb5c582d6ff386b383b7dce",
		DeliveryID: bodyID(body), Source: "jfrog",
	}
	cases := authCases("jfrog", body, want)
	cases = append(cases, []parseCase{
		{name: "token instead of signature", req: signed("jfrog", body, header("X-JFrog-Event-Auth", string(testSecret))), want: []Event{want}},
		{
			name: "host parameter for a per-repository host",
			req:  signed("jfrog", body, query("host", "docker-remote.example.com")),
			want: []Event{{Host: "docker-remote.example.com", Repository: "library/ubuntu", Tag: "latest", Digest: want.Digest, DeliveryID: want.DeliveryID, Source: "jfrog"}},
		},
		{name: "deleted tag", req: signed("jfrog", edit(t, body, `"event_type": "pushed"`, `"event_type": "deleted"`)), err: ErrIgnored},
		{name: "artifact domain", req: signed("jfrog", edit(t, body, `"domain": "docker"`, `"domain": "artifact"`)), err: ErrIgnored},
		{name: "no host anywhere", req: signed("jfrog", edit(t, body, `"jpd_origin": "https://example.jfrog.io"`, `"jpd_origin": ""`)), err: ErrMalformed},
		{name: "no image name", req: signed("jfrog", edit(t, body, `"image_name": "library/ubuntu"`, `"image_name": ""`)), err: ErrMalformed},
	}...)
	runParse(t, "jfrog", cases)
}
