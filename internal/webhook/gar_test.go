package webhook

import (
	"encoding/base64"
	"testing"
)

// pubsubPush wraps a registry notification as a Pub/Sub push subscription delivers it.
func pubsubPush(notification string) []byte {
	data := base64.StdEncoding.EncodeToString([]byte(notification))
	return []byte(`{"message": {"data": "` + data + `", "messageId": "m1"}, "subscription": "projects/p/subscriptions/s"}`)
}

func TestGAR(t *testing.T) {
	body := load(t, "gar")
	const digest = "sha256:6ec128e26cd5d9f1c5e4b4c1c4b8b1c6e5ff6c7b0f2e3d4a5b6c7d8e9f0a1b2c"
	want := Event{Host: "us-east1-docker.pkg.dev", Repository: "my-project/my-repo/hello-world", Tag: "1.1", Digest: digest, DeliveryID: "2070443601311540", Source: "gar"}
	const image = "us-east1-docker.pkg.dev/my-project/my-repo/hello-world"

	cases := authCases("gar", body, want)
	cases = append(cases, []parseCase{
		{
			name: "Container Registry tag without digest",
			req:  signed("gar", pubsubPush(`{"action":"INSERT","tag":"us.gcr.io/am/am.kebab.api:test"}`)),
			want: []Event{{Host: "us.gcr.io", Repository: "am/am.kebab.api", Tag: "test", DeliveryID: "m1", Source: "gar"}},
		},
		{name: "delete", req: signed("gar", pubsubPush(`{"action":"DELETE","tag":"`+image+`:1.1"}`)), err: ErrIgnored},
		{name: "push by digest", req: signed("gar", pubsubPush(`{"action":"INSERT","digest":"`+image+`@`+digest+`"}`)), err: ErrIgnored},
		{name: "digest of another image", req: signed("gar", pubsubPush(`{"action":"INSERT","digest":"`+image+`2@`+digest+`","tag":"`+image+`:1.1"}`)), err: ErrMalformed},
		{name: "tag without tag part", req: signed("gar", pubsubPush(`{"action":"INSERT","tag":"`+image+`"}`)), err: ErrMalformed},
		{name: "data not base64", req: signed("gar", []byte(`{"message": {"data": "%%%", "messageId": "m1"}}`)), err: ErrMalformed},
		{name: "data not JSON", req: signed("gar", pubsubPush(`INSERT`)), err: ErrMalformed},
		{name: "no message", req: signed("gar", []byte(`{"subscription": "projects/p/subscriptions/s"}`)), err: ErrMalformed},
	}...)
	runParse(t, "gar", cases)
}
