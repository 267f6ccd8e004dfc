package webhook

import "testing"

func TestACR(t *testing.T) {
	body := load(t, "acr")
	want := Event{
		Host: "myregistry.azurecr.io", Repository: "hello-world", Tag: "v1",
		Digest:     "sha256:80f0d5c8786bb9e621a45ece0db56d11cdc624ad20da9fe62e9d25490f331d7d",
		DeliveryID: "cb8c3971-9adc-488b-bdd8-43cbb4974ff5", Source: "acr",
	}
	cases := authCases("acr", body, want)
	cases = append(cases, []parseCase{
		{name: "delete", req: signed("acr", edit(t, body, `"action": "push"`, `"action": "delete"`)), err: ErrIgnored},
		{name: "chart push", req: signed("acr", edit(t, body, `"action": "push"`, `"action": "chart_push"`)), err: ErrIgnored},
		{name: "ping", req: signed("acr", edit(t, body, `"action": "push"`, `"action": "ping"`)), err: ErrIgnored},
		{name: "untagged push", req: signed("acr", edit(t, body, `"tag": "v1"`, `"tag": ""`)), err: ErrIgnored},
		{name: "no request host", req: signed("acr", edit(t, body, `"host": "myregistry.azurecr.io"`, `"host": ""`)), err: ErrMalformed},
	}...)
	runParse(t, "acr", cases)
}
