package receiver_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/testenv/replay"
)

// TestDocumentedPayloadsIntegration sends every example payload of docs/webhooks.md as the page
// says it arrives: a registry's webhook to the namespace receiver's URL with the page's headers
// and query parameters, signed or carrying the token as the provider does, or a registry
// CloudEvent with its type, source and id to the Broker's surface. Each must be accepted and its
// scan must put the tag its comment names into the status of an ImageRepository of the image it
// names, in a registry that holds that tag.
func TestDocumentedPayloadsIntegration(t *testing.T) {
	// The examples follow each other within a second, several of them with one image: every
	// delivery lists the repositories afresh, as a repository created a moment ago is otherwise
	// missed until its own add event (which the fixture has no source for) scans it.
	f := newFixture(t, receiver.WithRateLimit(rate.Inf, 0))
	for _, e := range replay.Read(t, "../../docs/webhooks.md") {
		image, tag := e.Get("image"), e.Get("tag")
		name := e.Get("provider")
		if e.Has("cloudevent") {
			name = e.Get("type")
		}
		t.Run(fmt.Sprintf("%s line %d", name, e.Line), func(t *testing.T) {
			_, repo, ok := strings.Cut(image, "/")
			if !ok || tag == "" {
				t.Fatalf("%s: the comment names no image host/path and tag", e.Where())
			}
			f.reg.Push(t, repo, "0.0.1", tag)
			if e.Has("cloudevent") {
				ns := f.namespace(t, "")
				f.createRepo(t, ns, "app", image)
				code, body := f.post(t, cloudEvent{ceType: e.Get("type"), source: e.Get("source"), id: e.Get("id")}, e.Body)
				if code/100 != 2 {
					t.Fatalf("%s: answered %d %s", e.Where(), code, body)
				}
				f.waitTag(t, ns, "app", tag)
				return
			}
			ns := f.namespace(t, token)
			f.createRepo(t, ns, "app", image)
			d := documented(t, e, "/hook/"+name+"/"+ns)
			code, a := f.send(t, d)
			if code != http.StatusAccepted || fmt.Sprint(a.Objects) != fmt.Sprintf("[{%s app}]", ns) {
				t.Fatalf("%s: answered %d %+v", e.Where(), code, a)
			}
			f.waitTag(t, ns, "app", tag)
		})
	}
}

// documented is the delivery of example e to path: its body, the headers and query parameters
// its comment names, and the provider's signature or token. signed's own stand-ins for what a
// sender adds besides the signature are left out: the page says which of them are needed.
func documented(t *testing.T, e replay.Example, path string) delivery {
	t.Helper()
	d := signed(e.Get("provider"), path, token, e.Body)
	for _, h := range []string{"X-GitHub-Event", "X-GitHub-Delivery", "X-Nexus-Webhook-ID", "X-Nexus-Webhook-Delivery"} {
		d.header.Del(h)
	}
	d.query.Del("host")
	for _, h := range e.Attrs["header"] {
		k, v, _ := strings.Cut(h, ":")
		d.header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	for _, q := range e.Attrs["query"] {
		values, err := url.ParseQuery(q)
		if err != nil {
			t.Fatalf("%s: query %q: %v", e.Where(), q, err)
		}
		for k, v := range values {
			d.query[k] = v
		}
	}
	return d
}
