package events

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
)

func TestSendDeliversOverHTTP(t *testing.T) {
	got := make(chan cloudevents.Event, 1)
	p, err := cloudevents.NewHTTP()
	if err != nil {
		t.Fatal(err)
	}
	h, err := cloudevents.NewHTTPReceiveHandler(context.Background(), p, func(e cloudevents.Event) {
		got <- e
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	s, err := NewSender(srv.URL, SourceScan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), TypeTagsChanged, "apps/app", TagsChanged{Namespace: "apps", Name: "app", Revision: "r1"}); err != nil {
		t.Fatal(err)
	}
	e := <-got
	if e.Type() != TypeTagsChanged || e.Source() != SourceScan || e.Subject() != "apps/app" || e.ID() == "" {
		t.Errorf("received %s", e)
	}
	var data TagsChanged
	if err := e.DataAs(&data); err != nil || data != (TagsChanged{Namespace: "apps", Name: "app", Revision: "r1"}) {
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
