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
	"dockerhub":    {"?token=<token>", queryTok},
	"quay":         {"?token=<token>", queryTok},
	"gar":          {"?token=<token>", queryTok},
}

func bearer(r *Request, s []byte)   { r.Header.Set("Authorization", "Bearer "+string(s)) }
func queryTok(r *Request, s []byte) { r.Query.Set("token", string(s)) }

// replay is one example payload of the page: the attributes of its
// <!-- replay: ... --> comment and the body of the fenced block that follows it.
type replay struct {
	line  int
	attrs map[string][]string
	body  []byte
}

func (r replay) get(key string) string {
	if v := r.attrs[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

var (
	replayComment = regexp.MustCompile(`^<!-- replay: (.*) -->$`)
	replayAttr    = regexp.MustCompile(`([a-z]+)(?:=(?:"([^"]*)"|(\S+)))?`)
)

// readReplays extracts every replay of the page. A comment must be followed directly by a
// fenced json block, so that no example can lose its replay by being moved.
func readReplays(t *testing.T, page string) []replay {
	t.Helper()
	lines := strings.Split(page, "\n")
	var out []replay
	for i := 0; i < len(lines); i++ {
		m := replayComment.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		r := replay{line: i + 1, attrs: map[string][]string{}}
		for _, a := range replayAttr.FindAllStringSubmatch(m[1], -1) {
			v := a[2] + a[3]
			r.attrs[a[1]] = append(r.attrs[a[1]], v)
		}
		if i+1 >= len(lines) || lines[i+1] != "```json" {
			t.Fatalf("%s:%d: a replay comment not followed by a ```json block", docsPage, r.line)
		}
		var body []string
		for i += 2; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		r.body = []byte(strings.Join(body, "\n"))
		out = append(out, r)
	}
	return out
}

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
	replays := readReplays(t, page)
	secret := []byte("a-token-of-the-receiver")
	seen := map[string]bool{}
	for _, r := range replays {
		var (
			events []Event
			err    error
			what   string
		)
		if _, ok := r.attrs["cloudevent"]; ok {
			what = r.get("type")
			events, err = ParseCloudEvent(what, r.get("source"), r.get("id"), r.body)
		} else {
			what = r.get("provider")
			auth, ok := docAuth[what]
			if !ok {
				t.Errorf("%s:%d: provider %q has no documented authentication in this test", docsPage, r.line, what)
				continue
			}
			req := Request{Header: http.Header{}, Query: url.Values{}, Body: r.body}
			for _, h := range r.attrs["header"] {
				k, v, _ := strings.Cut(h, ":")
				req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
			}
			for _, q := range r.attrs["query"] {
				values, err := url.ParseQuery(q)
				if err != nil {
					t.Fatalf("%s:%d: query %q: %v", docsPage, r.line, q, err)
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
			t.Errorf("%s:%d: %s: %v", docsPage, r.line, what, err)
			continue
		}
		image, tag := r.get("image"), r.get("tag")
		found := false
		for _, e := range events {
			if e.Host+"/"+e.Repository == image && e.Tag == tag {
				found = true
			}
		}
		if !found {
			t.Errorf("%s:%d: %s yields %+v, not %s:%s", docsPage, r.line, what, events, image, tag)
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
