package webhook

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

func TestEventGrid(t *testing.T) {
	body := load(t, "eventgrid")
	data := load(t, "eventgrid-data")
	const digest = "sha256:213b0e4a67bd9e7e7c0b6e8ba7b5e5a5d8b1c1e6f33e4c0f1e1d6e6b9e2f7a3c"
	pushed := func(id, repository, tag, digest string) Event {
		return Event{Host: "demo.azurecr.io", Repository: repository, Tag: tag, Digest: digest, DeliveryID: id, Source: "eventgrid"}
	}
	want := pushed("831e1650-001e-001b-66ab-eeb76e069631", "group1/testrepo", "v1", digest)
	// ce is one structured-mode event of type typ with id and data.
	ce := func(id, typ, data string) string {
		return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/subscriptions/x","type":%q,"data":%s}`, id, typ, data)
	}
	push := func(repository, tag string) string {
		return fmt.Sprintf(`{"action":"push","target":{"repository":%q,"tag":%q},"request":{"host":"demo.azurecr.io"}}`, repository, tag)
	}
	batch := func(events ...string) []byte { return []byte("[" + strings.Join(events, ",") + "]") }
	binary := signed("eventgrid", data, header("Ce-Specversion", "1.0"), header("Ce-Id", "bin-1"), header("Ce-Type", EventGridImagePushed))
	binaryDeleted := signed("eventgrid", data, header("Ce-Specversion", "1.0"), header("Ce-Id", "bin-2"), header("Ce-Type", "Microsoft.ContainerRegistry.ImageDeleted"))
	encoded := fmt.Sprintf(`{"specversion":"1.0","id":"b64","type":%q,"data_base64":%q}`, EventGridImagePushed, base64.StdEncoding.EncodeToString(data))
	var full []string
	for i := range MaxEventGridBatch {
		full = append(full, ce(fmt.Sprint(i), EventGridImagePushed, push("app", fmt.Sprintf("v%d", i))))
	}

	cases := authCases("eventgrid", body, want)
	cases = append(cases, []parseCase{
		{name: "batch: pushes kept, other types left out", req: signed("eventgrid", batch(
			ce("1", EventGridImagePushed, push("app", "v1")),
			ce("2", "Microsoft.ContainerRegistry.ImageDeleted", push("app", "v0")),
			ce("3", EventGridImagePushed, push("tools/cli", "2.0")),
		)), want: []Event{pushed("1", "app", "v1", ""), pushed("3", "tools/cli", "2.0", "")}},
		{name: "batch of other types only", req: signed("eventgrid", batch(
			ce("1", "Microsoft.ContainerRegistry.ImageDeleted", push("app", "v1")),
			ce("2", "Microsoft.ContainerRegistry.ChartPushed", push("app", "v1")),
		)), err: ErrIgnored},
		{name: "untagged push", req: signed("eventgrid", []byte(ce("1", EventGridImagePushed, push("app", "")))), err: ErrIgnored},
		{name: "full batch", req: signed("eventgrid", batch(full...)), want: func() []Event {
			var evs []Event
			for i := range MaxEventGridBatch {
				evs = append(evs, pushed(fmt.Sprint(i), "app", fmt.Sprintf("v%d", i), ""))
			}
			return evs
		}()},
		{name: "batch over the bound", req: signed("eventgrid", batch(append(full, ce("x", EventGridImagePushed, push("app", "v1")))...)), err: ErrMalformed},
		{name: "batch over the bound, the rest invalid", req: signed("eventgrid", []byte("["+strings.Join(full, ",")+",{} not json")), err: ErrMalformed},
		{name: "empty batch", req: signed("eventgrid", []byte(" [ ] ")), err: ErrMalformed},
		{name: "batch element not an object", req: signed("eventgrid", batch(ce("1", EventGridImagePushed, push("app", "v1")), `"x"`)), err: ErrMalformed},
		{name: "data after the batch", req: signed("eventgrid", append(batch(ce("1", EventGridImagePushed, push("app", "v1"))), "[]"...)), err: ErrMalformed},
		{name: "unterminated batch", req: signed("eventgrid", []byte("["+ce("1", EventGridImagePushed, push("app", "v1")))), err: ErrMalformed},
		{name: "no specversion", req: signed("eventgrid", edit(t, body, `"specversion": "1.0",`, "")), err: ErrMalformed},
		{name: "specversion 0.3", req: signed("eventgrid", edit(t, body, `"specversion": "1.0"`, `"specversion": "0.3"`)), err: ErrMalformed},
		{name: "no id", req: signed("eventgrid", edit(t, body, `"id": "831e1650-001e-001b-66ab-eeb76e069631",`, "")), err: ErrMalformed},
		{name: "no type", req: signed("eventgrid", edit(t, body, `"type": "Microsoft.ContainerRegistry.ImagePushed",`, "")), err: ErrMalformed},
		{name: "data not an object", req: signed("eventgrid", []byte(ce("1", EventGridImagePushed, `"push"`))), err: ErrMalformed},
		{name: "invalid repository in a batch", req: signed("eventgrid", batch(ce("1", EventGridImagePushed, push("app", "v1")), ce("2", EventGridImagePushed, push("Bad Name", "v1")))), err: ErrMalformed},
		{name: "data_base64", req: signed("eventgrid", []byte(encoded)), want: []Event{pushed("b64", "group1/testrepo", "v1", digest)}},
		{name: "data_base64 not base64", req: signed("eventgrid", []byte(strings.Replace(encoded, `"data_base64":"`, `"data_base64":"%`, 1))), err: ErrMalformed},
		{name: "binary mode", req: binary, want: []Event{pushed("bin-1", "group1/testrepo", "v1", digest)}},
		{name: "binary mode, other type", req: binaryDeleted, err: ErrIgnored},
	}...)
	runParse(t, "eventgrid", cases)
}

// The id that a delivery is recognised by is the CloudEvent's, whatever the data's own id, and
// only Event Grid's deliveries are recognised by id.
func TestEventGridDedupByID(t *testing.T) {
	for _, p := range Providers() {
		if DedupByID(p) != (p == "eventgrid") || Handshake(p) != (p == "eventgrid") {
			t.Errorf("%s: DedupByID %v, Handshake %v", p, DedupByID(p), Handshake(p))
		}
	}
	if DedupByID("gitea") || Handshake("gitea") {
		t.Error("an unknown provider is recognised by id or has a handshake")
	}
	body := edit(t, load(t, "eventgrid"), `"id": "831e1650-001e-001b-66ab-eeb76e069631",`, `"id": "grid-7",`)
	evs, err := Parse("eventgrid", signed("eventgrid", body), testSecret)
	if err != nil || len(evs) != 1 || evs[0].DeliveryID != "grid-7" {
		t.Fatalf("Parse = %+v, %v; want one event with delivery id grid-7", evs, err)
	}
}
