package webhook

import (
	"crypto/sha1"
	"crypto/sha256"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/imagereflector/reflector/internal/testenv/replay"
)

// docsPage is the page whose example payloads TestDocumentedPayloads replays.
const docsPage = "../../docs/webhooks.md"

// docAuth says how each provider's sender proves itself, as docs/webhooks.md's table of
// receivers tells it: marker is what that provider's row must say, sign what the test does.
var docAuth = map[string]struct {
	marker string
	sign   func(r *Request, secret []byte)
}{
	"github": {"X-Hub-Signature-256", func(r *Request, s []byte) {
		r.Header.Set("X-Hub-Signature-256", "sha256="+hexMAC(sha256.New, s, r.Body))
	}},
	"generic": {"X-Signature", func(r *Request, s []byte) {
		r.Header.Set("X-Signature", "sha256="+hexMAC(sha256.New, s, r.Body))
	}},
	"nexus": {"X-Nexus-Webhook-Signature", func(r *Request, s []byte) {
		r.Header.Set("X-Nexus-Webhook-Signature", hexMAC(sha1.New, s, r.Body))
	}},
	"jfrog": {"X-JFrog-Event-Auth", func(r *Request, s []byte) {
		r.Header.Set("X-JFrog-Event-Auth", hexMAC(sha256.New, s, r.Body))
	}},
	"harbor":       {"Bearer <token>", bearer},
	"acr":          {"Bearer <token>", bearer},
	"distribution": {"Bearer <token>", bearer},
	"ecr":          {"Bearer <token>", bearer},
	"eventgrid":    {"Bearer <token>", bearer},
	"dockerhub":    {"?token=<token>", queryTok},
	"quay":         {"?token=<token>", queryTok},
	"gar":          {"?token=<token>", queryTok},
}

func bearer(r *Request, s []byte)   { r.Header.Set("Authorization", "Bearer "+string(s)) }
func queryTok(r *Request, s []byte) { r.Query.Set("token", string(s)) }

// TestDocumentedPayloads replays every example payload of docs/webhooks.md through Parse (with
// the provider's documented signature or token) or ParseCloudEvent, and checks that it yields
// the image and tag its comment states. Every HTTP provider and every CloudEvent type must have
// an example, and the page's table must say how each provider's token travels.
func TestDocumentedPayloads(t *testing.T) {
	raw, err := os.ReadFile(docsPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	replays := replay.Read(t, docsPage)
	secret := []byte("a-token-of-the-receiver")
	seen := map[string]bool{}
	for _, r := range replays {
		var (
			events []Event
			err    error
			what   string
		)
		if r.Has("cloudevent") {
			what = r.Get("type")
			events, err = ParseCloudEvent(what, r.Get("source"), r.Get("id"), r.Body)
		} else {
			what = r.Get("provider")
			auth, ok := docAuth[what]
			if !ok {
				t.Errorf("%s: provider %q has no documented authentication in this test", r.Where(), what)
				continue
			}
			req := Request{Header: http.Header{}, Query: url.Values{}, Body: r.Body}
			for _, h := range r.Attrs["header"] {
				k, v, _ := strings.Cut(h, ":")
				req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
			}
			for _, q := range r.Attrs["query"] {
				values, err := url.ParseQuery(q)
				if err != nil {
					t.Fatalf("%s: query %q: %v", r.Where(), q, err)
				}
				for k, v := range values {
					req.Query[k] = v
				}
			}
			auth.sign(&req, secret)
			events, err = Parse(what, req, secret)
		}
		seen[what] = true
		if err != nil {
			t.Errorf("%s: %s: %v", r.Where(), what, err)
			continue
		}
		image, tag := r.Get("image"), r.Get("tag")
		found := false
		for _, e := range events {
			if e.Host+"/"+e.Repository == image && e.Tag == tag {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %s yields %+v, not %s:%s", r.Where(), what, events, image, tag)
		}
	}

	for _, p := range Providers() {
		if !seen[p] {
			t.Errorf("%s has no replayed example for provider %s", docsPage, p)
		}
		auth := docAuth[p]
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(p) + "` \\|.*$").FindString(page)
		if row == "" || !strings.Contains(row, auth.marker) {
			t.Errorf("%s: the receivers' table row of %s does not say %q: %q", docsPage, p, auth.marker, row)
		}
	}
	for _, typ := range []string{EventGridImagePushed, EventarcMessagePublished, CDEventsArtifactPublished} {
		found := false
		for s := range seen {
			if s == typ || strings.HasPrefix(s, typ) && strings.HasSuffix(typ, ".") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s has no replayed example of CloudEvent type %s", docsPage, typ)
		}
	}
}
