package webhook

import "testing"

func TestDistribution(t *testing.T) {
	// The documented envelope: a manifest push, the blob push of the same image, and a pull.
	body := load(t, "distribution")
	const digest = "sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf"
	want := Event{Host: "registrycluster.local", Repository: "library/test", Tag: "latest", Digest: digest, DeliveryID: "asdf-asdf-asdf-asdf-0", Source: "distribution"}
	single := func(action, mediaType, url, tag, host string) []byte {
		return []byte(`{"events": [{"id": "e1", "action": "` + action + `", "target": {"mediaType": "` + mediaType +
			`", "digest": "` + digest + `", "repository": "team/app", "url": "` + url + `", "tag": "` + tag +
			`"}, "request": {"host": "` + host + `"}}]}`)
	}
	const manifest = "application/vnd.oci.image.manifest.v1+json"

	cases := authCases("distribution", body, want)
	cases = append(cases, []parseCase{
		{
			name: "manifest known by URL only",
			req:  signed("distribution", single("push", "", "http://registry:5000/v2/team/app/manifests/v2", "v2", "registry:5000")),
			want: []Event{{Host: "registry:5000", Repository: "team/app", Tag: "v2", Digest: digest, DeliveryID: "e1", Source: "distribution"}},
		},
		{
			name: "host from target URL",
			req:  signed("distribution", single("push", manifest, "https://registry.example.com/v2/team/app/manifests/v2", "v2", "")),
			want: []Event{{Host: "registry.example.com", Repository: "team/app", Tag: "v2", Digest: digest, DeliveryID: "e1", Source: "distribution"}},
		},
		{name: "pulls and blobs only", req: signed("distribution", edit(t, body, `"action": "push"`, `"action": "pull"`)), err: ErrIgnored},
		{name: "delete", req: signed("distribution", single("delete", "", "", "v2", "registry:5000")), err: ErrIgnored},
		{name: "mount", req: signed("distribution", single("mount", "application/octet-stream", "", "", "registry:5000")), err: ErrIgnored},
		{name: "blob push by URL", req: signed("distribution", single("push", "", "http://registry:5000/v2/team/app/blobs/"+digest, "", "registry:5000")), err: ErrIgnored},
		{name: "untagged manifest push", req: signed("distribution", single("push", manifest, "", "", "registry:5000")), err: ErrIgnored},
		{name: "empty events", req: signed("distribution", []byte(`{"events": []}`)), err: ErrIgnored},
		{name: "no events array", req: signed("distribution", []byte(`{}`)), err: ErrMalformed},
		{name: "no host", req: signed("distribution", single("push", manifest, "", "v2", "")), err: ErrMalformed},
	}...)
	runParse(t, "distribution", cases)
}
