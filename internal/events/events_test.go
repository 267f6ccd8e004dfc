package events

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
)

func TestSendDeliversOverHTTP(t *testing.T) {
	got := make(chan cloudevents.Event, 1)
	srv := httptest.NewServer(Handler(func(_ context.Context, e cloudevents.Event) error {
		got <- e
		return nil
	}))
	defer srv.Close()

	s, err := NewSender(srv.URL, SourceScan, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := TagsChanged{Namespace: "apps", Name: "app", Revision: "r1", Attached: []string{"sha256:" + strings.Repeat("a", 64)}}
	if err := s.Send(context.Background(), TypeTagsChanged, "apps/app", sent); err != nil {
		t.Fatal(err)
	}
	e := <-got
	if e.Type() != TypeTagsChanged || e.Source() != SourceScan || e.Subject() != "apps/app" || e.ID() == "" {
		t.Errorf("received %s", e)
	}
	var data TagsChanged
	if err := e.DataAs(&data); err != nil || !reflect.DeepEqual(data, sent) {
		t.Errorf("data = %+v, %v", data, err)
	}
}

func TestSendReportsRefusal(t *testing.T) {
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer refusing.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()

	for name, url := range map[string]string{"refusing": refusing.URL, "down": downURL} {
		s, err := NewSender(url, SourceCron, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(context.Background(), TypeScanRequested, "apps/app", ObjectRef{Namespace: "apps", Name: "app"})
		if !errors.Is(err, ErrNotAcknowledged) {
			t.Errorf("%s sink: want ErrNotAcknowledged, got %v", name, err)
		}
	}
}

func TestNilSenderIsSilent(t *testing.T) {
	s, err := NewSender("", SourcePolicy, nil)
	if err != nil || s != nil {
		t.Fatalf("NewSender(\"\") = %v, %v", s, err)
	}
	if err := s.Send(context.Background(), TypeLatestChanged, "x", nil); err != nil {
		t.Error(err)
	}
	if s.Target() != "" {
		t.Error(s.Target())
	}
}

func TestHandlerAnswers(t *testing.T) {
	srv := httptest.NewServer(Handler(func(_ context.Context, e cloudevents.Event) error {
		var ref ObjectRef
		if err := Decode(e, &ref); err != nil {
			return err
		}
		if ref.Name == "fail" {
			return errors.New("store unavailable")
		}
		return nil
	}))
	defer srv.Close()
	s, err := NewSender(srv.URL, SourceCron, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Send(ctx, TypeScanRequested, "a/b", ObjectRef{Namespace: "a", Name: "b"}); err != nil {
		t.Errorf("accepted event: %v", err)
	}
	if err := s.Send(ctx, TypeScanRequested, "a/fail", ObjectRef{Namespace: "a", Name: "fail"}); !errors.Is(err, ErrNotAcknowledged) {
		t.Errorf("failing handler: %v", err)
	}
	if err := s.Send(ctx, TypeScanRequested, "a/b", "not an object"); !errors.Is(err, ErrNotAcknowledged) {
		t.Errorf("undecodable data: %v", err)
	}
	for _, tc := range []struct {
		method, body string
		header       map[string]string
		want         int
	}{
		{method: http.MethodGet, want: http.StatusMethodNotAllowed},
		{method: http.MethodPost, body: "{}", want: http.StatusBadRequest},
		{method: http.MethodPost, body: `{"specversion":"1.0","id":"1","source":"/x","type":"t","data":{"namespace":"a","name":"b"}}`,
			header: map[string]string{"Content-Type": "application/cloudevents+json"}, want: http.StatusAccepted},
		{method: http.MethodPost, body: `{"specversion":"1.0","source":"/x","type":"t"}`,
			header: map[string]string{"Content-Type": "application/cloudevents+json"}, want: http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.body, resp.StatusCode, tc.want)
		}
	}
}

func TestSenderHidesTargetCredentials(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	target := strings.Replace(down.URL, "http://", "http://user:planted-sink-password@", 1)
	down.Close()

	s, err := NewSender(target, SourceCron, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Target(), strings.Replace(down.URL, "http://", "http://xxxxx@", 1); got != want {
		t.Errorf("Target() = %q, want %q", got, want)
	}
	err = s.Send(context.Background(), TypeScanRequested, "apps/app", ObjectRef{Namespace: "apps", Name: "app"})
	if !errors.Is(err, ErrNotAcknowledged) {
		t.Errorf("want ErrNotAcknowledged, got %v", err)
	}
	if strings.Contains(err.Error(), "planted-sink-password") {
		t.Errorf("the error shows the sink's password: %v", err)
	}

	for _, bad := range []string{"http://user:planted sink password@127.0.0.1:1/", "socks5://user:planted-sink-password@127.0.0.1:1", "user:planted-sink-password@127.0.0.1:1"} {
		_, err := NewSender(bad, SourceCron, nil)
		if err == nil {
			t.Errorf("NewSender(%q) accepted it", bad)
			continue
		}
		if strings.Contains(err.Error(), "planted") {
			t.Errorf("the error shows the sink's password: %v", err)
		}
	}
}

func TestHandlerAnswerHidesURLUserinfo(t *testing.T) {
	srv := httptest.NewServer(Handler(func(context.Context, cloudevents.Event) error {
		return errors.New(`reading ImageRepository: Get "https://admin:planted-password@127.0.0.1:6443/apis": EOF`)
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"specversion":"1.0","id":"1","source":"/x","type":"t"}`))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(string(body), "planted-password") ||
		!strings.Contains(string(body), "https://xxxxx@127.0.0.1:6443") {
		t.Errorf("answer %d %q", resp.StatusCode, body)
	}
}
