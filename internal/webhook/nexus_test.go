package webhook

import "testing"

func TestNexus(t *testing.T) {
	body := load(t, "nexus")
	want := Event{Host: nexusHost, Repository: "app1/alpine", Tag: "3.4", DeliveryID: nexusDelivery, Source: "nexus"}
	noHost := func(r *Request) { r.Query.Del("host") }

	cases := authCases("nexus", body, want)
	cases = append(cases, []parseCase{
		{
			name: "host with a path prefix",
			req:  signed("nexus", body, query("host", "https://nexus.example.com/repository/docker-hosted/")),
			want: []Event{{Host: "nexus.example.com", Repository: "repository/docker-hosted/app1/alpine", Tag: "3.4", DeliveryID: nexusDelivery, Source: "nexus"}},
		},
		{name: "updated component", req: signed("nexus", edit(t, body, `"CREATED"`, `"UPDATED"`)), want: []Event{want}},
		{name: "missing host parameter", req: signed("nexus", body, noHost), err: ErrMalformed},
		{name: "deleted component", req: signed("nexus", edit(t, body, `"CREATED"`, `"DELETED"`)), err: ErrIgnored},
		{name: "maven component", req: signed("nexus", edit(t, body, `"docker"`, `"maven2"`)), err: ErrIgnored},
		{name: "asset webhook", req: signed("nexus", body, header("X-Nexus-Webhook-ID", "rm:repository:asset")), err: ErrIgnored},
		{name: "no component", req: signed("nexus", []byte(`{"action": "CREATED", "asset": {"format": "docker"}}`)), err: ErrIgnored},
		{name: "invalid name", req: signed("nexus", edit(t, body, `"app1/alpine"`, `"app1/Alp ine"`)), err: ErrMalformed},
	}...)
	runParse(t, "nexus", cases)
}
