package webhook

import "testing"

func TestECR(t *testing.T) {
	body := load(t, "ecr")
	want := Event{
		Host: "123456789012.dkr.ecr.us-west-2.amazonaws.com", Repository: "my-repository-name", Tag: "latest",
		Digest:     "sha256:7f5b2640fe6fb4f46592dfd3410c4a79dac4f89e4782432e0378abcd1234ef56",
		DeliveryID: "13cde686-328b-6117-af20-0e5566167482", Source: "ecr",
	}
	china := want
	china.Host = "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"

	cases := authCases("ecr", body, want)
	cases = append(cases, []parseCase{
		{name: "China region", req: signed("ecr", edit(t, body, `"us-west-2"`, `"cn-north-1"`)), want: []Event{china}},
		{name: "delete", req: signed("ecr", edit(t, body, `"PUSH"`, `"DELETE"`)), err: ErrIgnored},
		{name: "failed push", req: signed("ecr", edit(t, body, `"SUCCESS"`, `"FAILURE"`)), err: ErrIgnored},
		{name: "untagged push", req: signed("ecr", edit(t, body, `"image-tag": "latest"`, `"image-tag": ""`)), err: ErrIgnored},
		{name: "scan event", req: signed("ecr", edit(t, body, `"ECR Image Action"`, `"ECR Image Scan"`)), err: ErrIgnored},
		{name: "invalid account", req: signed("ecr", edit(t, body, `"123456789012"`, `"evil.example.com/x"`)), err: ErrMalformed},
		{name: "invalid region", req: signed("ecr", edit(t, body, `"us-west-2"`, `"us-west-2.evil"`)), err: ErrMalformed},
	}...)
	runParse(t, "ecr", cases)
}
