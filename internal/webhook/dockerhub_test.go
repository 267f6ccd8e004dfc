package webhook

import "testing"

func TestDockerHub(t *testing.T) {
	body := load(t, "dockerhub")
	want := Event{Host: "docker.io", Repository: "svendowideit/testhook", Tag: "latest", DeliveryID: bodyID(body), Source: "dockerhub"}
	official := edit(t, body, `"repo_name": "svendowideit/testhook"`, `"repo_name": "nginx"`)

	cases := authCases("dockerhub", body, want)
	cases = append(cases, []parseCase{
		{
			name: "official image",
			req:  signed("dockerhub", official),
			want: []Event{{Host: "docker.io", Repository: "library/nginx", Tag: "latest", DeliveryID: bodyID(official), Source: "dockerhub"}},
		},
		{name: "no tag", req: signed("dockerhub", edit(t, body, `"tag": "latest"`, `"tag": ""`)), err: ErrIgnored},
		{name: "not a push", req: signed("dockerhub", []byte(`{"repository": {"repo_name": "svendowideit/testhook"}}`)), err: ErrIgnored},
		{name: "no repository", req: signed("dockerhub", edit(t, body, `"repo_name": "svendowideit/testhook"`, `"repo_name": ""`)), err: ErrMalformed},
	}...)
	runParse(t, "dockerhub", cases)
}
