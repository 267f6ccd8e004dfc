package receiver_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/receiver"
)

// clientFrom returns an HTTP client whose connections come from the loopback address ip, so
// that the receiver sees another remote address.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// sendFrom sends d to the fixture with client and returns the answer's status.
func (f *fixture) sendFrom(t testing.TB, client *http.Client, d delivery) int {
	t.Helper()
	u := f.srv.URL + d.path
	if len(d.query) > 0 {
		u += "?" + d.query.Encode()
	}
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(d.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range d.header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestWebhookIntegrationUnauthenticatedLimit: deliveries that fail authentication spend their
// remote address's budget; once it is spent, a delivery from that address is answered 429
// before its body is read; authenticated deliveries give their token back, and another address
// has a budget of its own.
func TestWebhookIntegrationUnauthenticatedLimit(t *testing.T) {
	f := newFixture(t, receiver.WithUnauthenticatedLimit(0.001, 3), receiver.WithRateLimit(rate.Inf, 0))
	ns := f.namespace(t, token)
	path := "/hook/generic/" + ns
	body := []byte(`{"image":"ghcr.io/example/none","tag":"v1"}`)
	good, forged := signed("generic", path, token, body), signed("generic", path, "wrong", body)

	// Authenticated deliveries never spend the budget.
	attacker, registry := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	for i := range 10 {
		if code := f.sendFrom(t, registry, good); code != http.StatusOK {
			t.Fatalf("authenticated delivery %d: %d", i, code)
		}
	}
	for i := range 2 {
		if code := f.sendFrom(t, registry, forged); code != http.StatusUnauthorized {
			t.Errorf("forged delivery %d after 10 authenticated ones: %d, want 401", i, code)
		}
	}

	for i := range 3 {
		if code := f.sendFrom(t, attacker, forged); code != http.StatusUnauthorized {
			t.Fatalf("forged delivery %d within the budget: %d, want 401", i, code)
		}
	}
	for i := range 20 {
		if code := f.sendFrom(t, attacker, forged); code != http.StatusTooManyRequests {
			t.Fatalf("forged delivery %d over the budget: %d, want 429", i, code)
		}
	}
	// The refusal comes before the body: a request that announces a 1 MiB body and sends none
	// is answered.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard, not a measurement
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: reflector\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, receiver.MaxBodyBytes)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a request whose body was never sent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("headers only, over the budget: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The budget is the address's: the registry's deliveries still pass.
	if code := f.sendFrom(t, registry, good); code != http.StatusOK {
		t.Errorf("authenticated delivery from another address during the flood: %d", code)
	}
	if n := strings.Count(f.logs.String(), `"status":401`); n != 5 {
		t.Errorf("%d deliveries were verified and refused, want 5 (the attacker's budget of 3, the registry's 2)", n)
	}
}

// TestCloudEventIntegrationSenderLimits: registry pushes by CloudEvent have each sender's
// token bucket, and an event is remembered by its sender, source and id, so that one sender
// cannot make another's event a duplicate.
func TestCloudEventIntegrationSenderLimits(t *testing.T) {
	f := newFixture(t, receiver.WithRateLimit(0.001, 3))
	push := func(client *http.Client, id string) int {
		t.Helper()
		data := `{"context":{"id":"` + id + `"},"subject":{"id":"pkg:oci/app?repository_url=ghcr.io/example/none&tag=1.0.0"}}`
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, f.srv.URL+"/", strings.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "dev.cdevents.artifact.published.0.2.0",
			"Ce-Source": "/registry", "Ce-Id": id, "Content-Type": "application/json"} {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first, second := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	if code := push(first, "push-1"); code != http.StatusAccepted {
		t.Fatalf("a push: %d", code)
	}
	if code := push(first, "push-1"); code != http.StatusAccepted {
		t.Fatalf("the push again: %d", code)
	}
	if n := strings.Count(f.logs.String(), `"result":"duplicate delivery"`); n != 1 {
		t.Errorf("the same sender's repeat: %d duplicates logged, want 1", n)
	}
	// The same source and id from another sender is its own event.
	if code := push(second, "push-1"); code != http.StatusAccepted {
		t.Fatalf("another sender's push: %d", code)
	}
	if n := strings.Count(f.logs.String(), `"result":"duplicate delivery"`); n != 1 {
		t.Errorf("another sender's event with the same id was taken for a duplicate")
	}
	if code := push(first, "push-2"); code != http.StatusAccepted {
		t.Fatalf("the first sender's third push: %d", code)
	}
	for i := range 5 {
		if code := push(first, fmt.Sprintf("flood-%d", i)); code != http.StatusTooManyRequests {
			t.Errorf("push %d over the sender's rate: %d, want 429", i, code)
		}
	}
	if code := push(second, "push-2"); code != http.StatusAccepted {
		t.Errorf("the other sender during the first one's flood: %d", code)
	}
}
