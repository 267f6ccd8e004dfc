package webhook

import (
	"errors"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/imagename"
)

// checkFuzzResult holds for every input: no panic (checked by the fuzzer itself), either
// events or an error, a classified one-line error of bounded length, and events whose Host and
// Repository are set and already canonical.
func checkFuzzResult(t *testing.T, events []Event, err error, allowed ...error) {
	t.Helper()
	if err != nil {
		if events != nil {
			t.Fatalf("events %v returned with error %v", events, err)
		}
		classified := false
		for _, want := range allowed {
			classified = classified || errors.Is(err, want)
		}
		if !classified {
			t.Fatalf("error %v wraps none of %v", err, allowed)
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || len(msg) > 512 {
			t.Fatalf("error is not one short line: %q", msg)
		}
		return
	}
	if len(events) == 0 {
		t.Fatal("no events and no error")
	}
	for _, e := range events {
		if e.Host == "" || e.Repository == "" {
			t.Fatalf("event without host or repository: %+v", e)
		}
		if key := imagename.Key(e.Host, e.Repository); key != e.Host+"/"+e.Repository || key != e.Key() {
			t.Fatalf("event is not canonical: %+v has key %q", e, key)
		}
		if e.Tag != "" && !imagename.ValidTag(e.Tag) || e.Digest != "" && !digestPattern.MatchString(e.Digest) {
			t.Fatalf("event with an invalid tag or digest: %+v", e)
		}
		if e.DeliveryID == "" || e.Source == "" {
			t.Fatalf("event without delivery id or source: %+v", e)
		}
	}
}

// fuzzProvider fuzzes the body of authentic deliveries, and the ?host= parameter for the
// providers that read it, seeded with the documented payload and the given variants.
func fuzzProvider(f *testing.F, provider string, variants ...string) {
	f.Add(load(f, provider), "")
	for _, v := range variants {
		f.Add([]byte(v), "")
	}
	f.Add([]byte(`{}`), "registry.example.com:5000/prefix")
	f.Fuzz(func(t *testing.T, body []byte, host string) {
		req := signed(provider, body)
		if host != "" {
			req.Query.Set("host", host)
		}
		events, err := Parse(provider, req, testSecret)
		checkFuzzResult(t, events, err, ErrMalformed, ErrIgnored)
	})
}

func FuzzGitHub(f *testing.F) {
	fuzzProvider(f, "github",
		`{"action":"published","registry_package":{"name":"app","package_type":"CONTAINER","owner":{"login":"Org"},"package_version":{"version":"sha256:ab","metadata":{"container":{"tags":["v1","v2"]}}}}}`,
		`{"action":"updated","package":{"name":"app","ecosystem":"docker","package_version":{"package_url":"ghcr.io/org/app:v1@sha256:ab","container_metadata":{"tag":{"name":"v1"}}}}}`)
}

func FuzzNexus(f *testing.F) {
	fuzzProvider(f, "nexus", `{"action":"UPDATED","component":{"format":"docker","name":"team/app","version":"1.0"}}`)
}

func FuzzJFrog(f *testing.F) {
	fuzzProvider(f, "jfrog", `{"domain":"docker","event_type":"pushed","jpd_origin":"https://x.jfrog.io/artifactory","data":{"repo_key":"r","image_name":"a/b","tag":"t","sha256":"00"}}`)
}

func FuzzHarbor(f *testing.F) {
	fuzzProvider(f, "harbor", `{"type":"pushImage","event_data":{"resources":[{"tag":"a","resource_url":"h:1/p/r:a"},{"tag":"sha256:00","digest":"sha256:00","resource_url":"h/p/r@sha256:00"}],"repository":{}}}`)
}

func FuzzACR(f *testing.F) {
	fuzzProvider(f, "acr", `{"id":"1","action":"push","target":{"repository":"r","tag":"t","digest":"sha256:00"},"request":{"host":"x.azurecr.io"}}`)
}

func FuzzDistribution(f *testing.F) {
	fuzzProvider(f, "distribution",
		`{"events":[{"id":"1","action":"push","target":{"repository":"r","tag":"t","url":"http://h:5000/v2/r/manifests/t"},"request":{}}]}`,
		`{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.index.v1+json","repository":"a/b","tag":"t"},"request":{"host":"[::1]:5000"}}]}`)
}

// FuzzEventGrid fuzzes Event Grid's deliveries over HTTP: one CloudEvent, a batch, and the
// binary mode, whose attributes are headers the fuzzer leaves alone.
func FuzzEventGrid(f *testing.F) {
	fuzzProvider(f, "eventgrid",
		`[{"specversion":"1.0","id":"a","type":"Microsoft.ContainerRegistry.ImageDeleted","data":{}},{"specversion":"1.0","id":"b","type":"Microsoft.ContainerRegistry.ImagePushed","data":{"action":"push","target":{"repository":"r","tag":"t"},"request":{"host":"x.azurecr.io"}}}]`,
		`{"specversion":"1.0","id":"c","type":"Microsoft.ContainerRegistry.ImagePushed","data_base64":"eyJhY3Rpb24iOiJwdXNoIn0="}`,
		`[]`, `[{}, 1]`)
}

func FuzzECR(f *testing.F) {
	fuzzProvider(f, "ecr", `{"detail-type":"ECR Image Action","account":"000000000000","region":"cn-north-1","detail":{"result":"SUCCESS","action-type":"PUSH","repository-name":"a/b","image-tag":"t"}}`)
}

func FuzzDockerHub(f *testing.F) {
	fuzzProvider(f, "dockerhub", `{"push_data":{"tag":"t"},"repository":{"repo_name":"nginx"}}`)
}

func FuzzQuay(f *testing.F) {
	fuzzProvider(f, "quay",
		`{"repository":"ns/r","updated_tags":{"a":"1","b":"2"}}`,
		`{"docker_url":"quay.example.com:8443/ns/r","updated_tags":["a","a","b"]}`)
}

func FuzzGAR(f *testing.F) {
	fuzzProvider(f, "gar",
		string(pubsubPush(`{"action":"INSERT","tag":"us.gcr.io/am/am.kebab.api:test"}`)),
		string(pubsubPush(`{"action":"INSERT","digest":"gcr.io/p/a@sha256:00","tag":"gcr.io/p/a:t"}`)))
}

func FuzzGeneric(f *testing.F) {
	fuzzProvider(f, "generic", `{"image":"alpine:3@sha256:00"}`, `{"image":"localhost:5000/a","tag":"t"}`)
}

func FuzzCDEvents(f *testing.F) {
	f.Add(load(f, "cdevents"), "id")
	f.Add([]byte(`{"subject":{"id":"pkg:oci/a@sha256%3A00?repository_url=https://h:5000/a/b&tag=t&arch=amd64#sub"}}`), "")
	f.Fuzz(func(t *testing.T, data []byte, id string) {
		events, err := ParseCloudEvent("dev.cdevents.artifact.published.0.2.0", "/source", id, data)
		checkFuzzResult(t, events, err, ErrMalformed, ErrIgnored)
	})
}

func FuzzEventGridData(f *testing.F) {
	f.Add(load(f, "eventgrid-data"), "id")
	f.Fuzz(func(t *testing.T, data []byte, id string) {
		events, err := ParseCloudEvent(EventGridImagePushed, "/subscriptions/x", id, data)
		checkFuzzResult(t, events, err, ErrMalformed, ErrIgnored)
	})
}

func FuzzEventarc(f *testing.F) {
	f.Add(load(f, "eventarc"), "//pubsub.googleapis.com/projects/p/topics/gcr")
	f.Add(load(f, "eventarc"), "")
	f.Fuzz(func(t *testing.T, data []byte, source string) {
		events, err := ParseCloudEvent(EventarcMessagePublished, source, "id", data)
		checkFuzzResult(t, events, err, ErrMalformed, ErrIgnored)
	})
}

// FuzzVerify presents arbitrary credentials in every place a provider looks: without the
// secret, no request gets past authentication, whatever the body.
func FuzzVerify(f *testing.F) {
	f.Add(uint8(0), "Bearer x", []byte(`{}`))
	f.Add(uint8(6), "sha256=00", load(f, "github"))
	f.Add(uint8(9), "00", load(f, "nexus"))
	f.Fuzz(func(t *testing.T, which uint8, credential string, body []byte) {
		names := Providers()
		provider := names[int(which)%len(names)]
		req := signedWith(provider, []byte("other"), body)
		for _, h := range []string{"X-Hub-Signature-256", "X-Nexus-Webhook-Signature", "X-JFrog-Event-Auth", "Authorization", "X-Signature"} {
			req.Header.Set(h, credential)
		}
		req.Query.Set("token", credential)
		events, err := Parse(provider, req, testSecret)
		if strings.Contains(credential, string(testSecret)) {
			return
		}
		if !errors.Is(err, ErrUnauthenticated) || events != nil {
			t.Fatalf("%s accepted credential %q: %v, %v", provider, credential, events, err)
		}
	})
}
