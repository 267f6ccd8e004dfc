package webhook

import "testing"

func TestGitHub(t *testing.T) {
	body := load(t, "github")
	const digest = "sha256:3da1996a8115d7616457760d9920b815241d0a03b34cf5f04e9a0e9d8de37498"
	want := Event{Host: "ghcr.io", Repository: "codertocat/hello-world", Tag: "latest", Digest: digest, DeliveryID: githubDelivery, Source: "github"}
	const packageURL = `"package_url": "ghcr.io/Codertocat/hello-world:latest"`
	// GitHub's own example is an untagged version: empty tag name, package_url ending in ':'.
	untagged := edit(t, edit(t, body, `"name": "latest"`, `"name": ""`), packageURL, `"package_url": "ghcr.io/Codertocat/hello-world:"`)

	cases := authCases("github", body, want)
	cases = append(cases, []parseCase{
		{
			name: "registry_package event",
			req:  signed("github", edit(t, body, `"package": {`, `"registry_package": {`), header("X-GitHub-Event", "registry_package")),
			want: []Event{want},
		},
		{
			name: "image from owner and name without package_url",
			req:  signed("github", edit(t, body, packageURL, `"package_url": ""`)),
			want: []Event{want},
		},
		{
			name: "tags from REST-style metadata",
			req:  signed("github", edit(t, body, `"metadata": []`, `"metadata": {"package_type": "container", "container": {"tags": ["latest", "1.0.0"]}}`)),
			want: []Event{want, {Host: "ghcr.io", Repository: "codertocat/hello-world", Tag: "1.0.0", Digest: digest, DeliveryID: githubDelivery, Source: "github"}},
		},
		{name: "untagged version", req: signed("github", untagged), err: ErrIgnored},
		{name: "ping", req: signed("github", []byte(`{"zen": "Design for failure."}`), header("X-GitHub-Event", "ping")), err: ErrIgnored},
		{name: "push event", req: signed("github", body, header("X-GitHub-Event", "push")), err: ErrIgnored},
		{
			name: "npm package",
			req:  signed("github", edit(t, edit(t, body, `"package_type": "CONTAINER"`, `"package_type": "npm"`), `"ecosystem": "CONTAINER"`, `"ecosystem": "npm"`)),
			err:  ErrIgnored,
		},
		{name: "unknown action", req: signed("github", edit(t, body, `"action": "published"`, `"action": "deleted"`)), err: ErrIgnored},
		{name: "no package", req: signed("github", []byte(`{"action": "published"}`)), err: ErrMalformed},
		{name: "no package_version", req: signed("github", []byte(`{"action": "published", "package": {"name": "app", "package_type": "CONTAINER"}}`)), err: ErrMalformed},
		{name: "tag of the wrong type", req: signed("github", edit(t, body, `"name": "latest"`, `"name": 7`)), err: ErrMalformed},
	}...)
	runParse(t, "github", cases)
}
