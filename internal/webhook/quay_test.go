package webhook

import "testing"

func TestQuay(t *testing.T) {
	body := load(t, "quay")
	event := func(body []byte, host, tag string) Event {
		return Event{Host: host, Repository: "mynamespace/repository", Tag: tag, DeliveryID: bodyID(body), Source: "quay"}
	}
	tags := `[
    "latest"
  ]`
	several := edit(t, body, tags, `["latest", "v1.0", "latest"]`)
	oldForm := edit(t, body, tags, `{"v1.0": "a1b2c3", "latest": "d4e5f6"}`)
	selfHosted := edit(t, body, `"quay.io/mynamespace/repository"`, `"quay.example.com/mynamespace/repository"`)

	cases := authCases("quay", body, event(body, "quay.io", "latest"))
	cases = append(cases, []parseCase{
		{name: "several tags", req: signed("quay", several), want: []Event{event(several, "quay.io", "latest"), event(several, "quay.io", "v1.0")}},
		{name: "old map form", req: signed("quay", oldForm), want: []Event{event(oldForm, "quay.io", "latest"), event(oldForm, "quay.io", "v1.0")}},
		{name: "self-hosted Quay", req: signed("quay", selfHosted), want: []Event{event(selfHosted, "quay.example.com", "latest")}},
		{name: "build notification", req: signed("quay", []byte(`{"repository": "mynamespace/repository", "build_id": "296ec063", "docker_tags": ["latest"]}`)), err: ErrIgnored},
		{name: "no tags", req: signed("quay", edit(t, body, tags, `[]`)), err: ErrIgnored},
		{name: "tags of the wrong type", req: signed("quay", edit(t, body, tags, `7`)), err: ErrMalformed},
	}...)
	runParse(t, "quay", cases)
}
