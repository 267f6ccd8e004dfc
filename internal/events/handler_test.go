package events

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	cloudevents "github.com/cloudevents/sdk-go/v2"
)

func post(h http.Handler, body io.Reader, headers map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/", body)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func binary(id string) map[string]string {
	return map[string]string{"Ce-Specversion": "1.0", "Ce-Type": TypeScanRequested, "Ce-Source": "/test", "Ce-Id": id, "Content-Type": "application/json"}
}

func TestHandlerCapsTheBody(t *testing.T) {
	called := false
	h := Handler(func(context.Context, cloudevents.Event) error { called = true; return nil })
	big := strings.NewReader(strings.Repeat("x", MaxEventBytes+1))
	// A body of unknown length is cut off while it is read.
	if rec := post(h, io.MultiReader(big), binary("1")); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body over the cap: %d", rec.Code)
	}
	if called {
		t.Error("the handler ran on an oversized event")
	}
	if rec := post(h, strings.NewReader(`{"namespace":"a","name":"b"}`), binary("2")); rec.Code != http.StatusAccepted || !called {
		t.Errorf("a small event: %d, called %v", rec.Code, called)
	}
}

func TestHandlerAnswersRepeatABoundedPrefix(t *testing.T) {
	marker := strings.Repeat("SECRETISH", 10000)
	h := Handler(func(_ context.Context, e cloudevents.Event) error {
		var ref ObjectRef
		return Decode(e, &ref)
	})
	rec := post(h, strings.NewReader(`{"namespace":"`+marker), binary("3"))
	if rec.Code != http.StatusBadRequest || rec.Body.Len() > 2*briefLimit+200 {
		t.Errorf("undecodable data: %d with %d bytes", rec.Code, rec.Body.Len())
	}
	rec = post(h, strings.NewReader(`{}`), binary(strings.Repeat("i", MaxAttributeBytes+1)))
	if rec.Code != http.StatusBadRequest || rec.Body.Len() > 2*briefLimit {
		t.Errorf("an oversized id: %d with %d bytes", rec.Code, rec.Body.Len())
	}
}

func TestBrief(t *testing.T) {
	long := strings.Repeat("é", briefLimit)
	b := Brief(long + "\nnext line")
	if !utf8.ValidString(b) || strings.Contains(b, "\n") || len(b) > briefLimit+32 {
		t.Errorf("Brief = %q", b)
	}
	if Brief("short") != "short" {
		t.Error("short text changed")
	}
}

func TestCheckObject(t *testing.T) {
	for _, c := range []struct {
		ns, name string
		ok       bool
	}{
		{"apps", "app", true},
		{"apps", "app.v1", true},
		{"", "app", false},
		{"Apps", "app", false},
		{"apps", strings.Repeat("a", 254), false},
		{"a/b", "app", false},
	} {
		if err := CheckObject(c.ns, c.name); (err == nil) != c.ok {
			t.Errorf("CheckObject(%q, %.20q) = %v", c.ns, c.name, err)
		}
	}
}

func TestSenderPresentsTheSinkToken(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	t.Setenv("K_SINK_TOKEN_FILE", file)
	s, err := NewSender(srv.URL, SourceScan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), TypeTagsChanged, "a/b", TagsChanged{}); err != nil {
		t.Fatal(err)
	}
	if auth := <-got; auth != "" {
		t.Errorf("no token file, Authorization %q", auth)
	}
	// Knative renews the file in place; each delivery reads it.
	if err := os.WriteFile(file, []byte("renewed-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), TypeTagsChanged, "a/b", TagsChanged{}); err != nil {
		t.Fatal(err)
	}
	if auth := <-got; auth != "Bearer renewed-token" {
		t.Errorf("Authorization %q", auth)
	}
}

func TestSenderPresentsItsOwnTokenFile(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	dir := t.TempDir()
	sink, own := filepath.Join(dir, "sink"), filepath.Join(dir, "own")
	for file, token := range map[string]string{sink: "sink-token", own: "own-token"} {
		if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("K_SINK_TOKEN_FILE", sink)
	for path, want := range map[string]string{own: "Bearer own-token", "": "Bearer sink-token"} {
		s, err := NewSender(srv.URL, SourceCron, nil, WithTokenFile(path))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(context.Background(), TypeScanRequested, "a/b", ObjectRef{Namespace: "a", Name: "b"}); err != nil {
			t.Fatal(err)
		}
		if auth := <-got; auth != want {
			t.Errorf("WithTokenFile(%q): Authorization %q, want %q", path, auth, want)
		}
	}
}

func TestHandlerAnswersTooManyWith429(t *testing.T) {
	h := Handler(func(context.Context, cloudevents.Event) error {
		return fmt.Errorf("%w: slow down", ErrTooMany)
	})
	rec := post(h, strings.NewReader(`{}`), binary("busy"))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a sender over its rate: %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// FuzzHandler feeds arbitrary requests, in binary and structured mode, through the handler and
// the decoding every function does: nothing panics, and no answer is large.
func FuzzHandler(f *testing.F) {
	f.Add("application/json", "1.0", TypeScanRequested, "/s", "id", []byte(`{"namespace":"a","name":"b"}`))
	f.Add("application/cloudevents+json", "", "", "", "", []byte(`{"specversion":"1.0","type":"t","source":"/s","id":"1","data":{"namespace":"a","name":"b"}}`))
	f.Add("application/cloudevents-batch+json", "", "", "", "", []byte(`[{}]`))
	f.Add("application/json", "0.3", "dev.knative.apiserver.resource.update", "/s", "x", []byte(`{"kind":"ImageRepository","metadata":{"name":"x"}}`))
	h := Handler(func(_ context.Context, e cloudevents.Event) error {
		var ref ObjectRef
		if err := Decode(e, &ref); err != nil {
			return err
		}
		return CheckObject(ref.Namespace, ref.Name)
	})
	f.Fuzz(func(t *testing.T, contentType, specVersion, ceType, source, id string, body []byte) {
		headers := map[string]string{"Content-Type": contentType}
		if specVersion != "" {
			headers["Ce-Specversion"], headers["Ce-Type"], headers["Ce-Source"], headers["Ce-Id"] = specVersion, ceType, source, id
		}
		rec := post(h, strings.NewReader(string(body)), headers)
		if rec.Body.Len() > 4*briefLimit {
			t.Errorf("answer of %d bytes", rec.Body.Len())
		}
	})
}
