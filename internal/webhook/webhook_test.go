package webhook

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var testSecret = []byte("s3cr3t-t0ken")

// Delivery ids the tests send in headers, as the vendors document them.
const (
	githubDelivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	nexusDelivery  = "7f69e7c0-6e43-4c1c-a4d3-1f7c3e4d1b2a"
	nexusHost      = "nexus.example.com:8082"
)

func load(tb testing.TB, provider string) []byte {
	tb.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", provider+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// edit returns body with old replaced by new, failing when old is absent so that a variant
// cannot silently equal the original.
func edit(tb testing.TB, body []byte, old, new string) []byte {
	tb.Helper()
	if !strings.Contains(string(body), old) {
		tb.Fatalf("edit: %q not in body", old)
	}
	return []byte(strings.Replace(string(body), old, new, 1))
}

type option func(*Request)

func header(k, v string) option { return func(r *Request) { r.Header.Set(k, v) } }
func query(k, v string) option  { return func(r *Request) { r.Query.Set(k, v) } }

func hexMAC(h func() hash.Hash, secret, body []byte) string {
	mac := hmac.New(h, secret)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// signedWith builds the request provider's sender makes for body with secret, including the
// non-secret headers and parameters the sender always sets.
func signedWith(provider string, secret, body []byte, opts ...option) Request {
	r := Request{Header: http.Header{}, Query: url.Values{}, Body: body}
	switch provider {
	case "github":
		r.Header.Set("X-GitHub-Event", "package")
		r.Header.Set("X-GitHub-Delivery", githubDelivery)
		r.Header.Set("X-Hub-Signature-256", "sha256="+hexMAC(sha256.New, secret, body))
	case "nexus":
		r.Header.Set("X-Nexus-Webhook-ID", "rm:repository:component")
		r.Header.Set("X-Nexus-Webhook-Delivery", nexusDelivery)
		r.Header.Set("X-Nexus-Webhook-Signature", hexMAC(sha1.New, secret, body))
		r.Query.Set("host", nexusHost)
	case "jfrog":
		r.Header.Set("X-JFrog-Event-Auth", hexMAC(sha256.New, secret, body))
	case "harbor", "acr", "distribution", "ecr", "eventgrid":
		r.Header.Set("Authorization", "Bearer "+string(secret))
	case "dockerhub", "quay", "gar":
		r.Query.Set("token", string(secret))
	case "generic":
		r.Header.Set("X-Signature", "sha256="+hexMAC(sha256.New, secret, body))
	default:
		panic("no test request for provider " + provider)
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// signed is an authentic delivery; forged is the same delivery signed with another secret.
func signed(provider string, body []byte, opts ...option) Request {
	return signedWith(provider, testSecret, body, opts...)
}

func forged(provider string, body []byte, opts ...option) Request {
	return signedWith(provider, []byte("not-the-secret"), body, opts...)
}

// unsigned is the delivery with its signature or token removed, other headers kept.
func unsigned(provider string, body []byte) Request {
	r := signed(provider, body)
	for _, h := range []string{"X-Hub-Signature-256", "X-Nexus-Webhook-Signature", "X-JFrog-Event-Auth", "Authorization", "X-Signature"} {
		r.Header.Del(h)
	}
	r.Query.Del("token")
	return r
}

type parseCase struct {
	name string
	req  Request
	want []Event
	err  error
}

// authCases are the cases every provider shares: the documented payload signed, unsigned and
// forged, and a body that is not JSON.
func authCases(provider string, body []byte, want ...Event) []parseCase {
	return []parseCase{
		{name: "documented payload", req: signed(provider, body), want: want},
		{name: "missing signature or token", req: unsigned(provider, body), err: ErrUnauthenticated},
		{name: "wrong signature or token", req: forged(provider, body), err: ErrUnauthenticated},
		{name: "forged and malformed", req: forged(provider, []byte("{not json")), err: ErrUnauthenticated},
		{name: "malformed body", req: signed(provider, []byte("{not json")), err: ErrMalformed},
		{name: "truncated body", req: signed(provider, body[:len(body)/2]), err: ErrMalformed},
		{name: "JSON null", req: signed(provider, []byte("null")), err: ErrMalformed},
		{name: "JSON array", req: signed(provider, []byte("[]")), err: ErrMalformed},
	}
}

func runParse(t *testing.T, provider string, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(provider, tc.req, testSecret)
			checkResult(t, got, err, tc.want, tc.err)
		})
	}
}

func checkResult(t *testing.T, got []Event, err error, want []Event, wantErr error) {
	t.Helper()
	if err != nil {
		msg := err.Error()
		if strings.ContainsAny(msg, "\n\r") {
			t.Errorf("error spans several lines: %q", msg)
		}
		if strings.Contains(msg, string(testSecret)) {
			t.Errorf("error reveals the secret: %q", msg)
		}
	}
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Fatalf("got %v, %v; want error %v", got, err, wantErr)
		}
		if got != nil {
			t.Errorf("got events %v with error %v", got, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseUnknownProvider(t *testing.T) {
	_, err := Parse("gitea", signed("github", load(t, "github")), testSecret)
	if !errors.Is(err, ErrUnknownProvider) || err.Error() != `unknown provider "gitea"` {
		t.Errorf("err = %v", err)
	}
	if Known("gitea") || !Known("github") {
		t.Error("Known disagrees with the registry")
	}
}

func TestProviders(t *testing.T) {
	want := []string{"acr", "distribution", "dockerhub", "ecr", "eventgrid", "gar", "generic", "github", "harbor", "jfrog", "nexus", "quay"}
	if got := Providers(); !reflect.DeepEqual(got, want) {
		t.Errorf("Providers() = %v", got)
	}
}

// An empty secret would make every HMAC computable and every empty token equal.
func TestParseEmptySecret(t *testing.T) {
	for _, p := range Providers() {
		body := []byte(`{}`)
		req := signedWith(p, nil, body)
		req.Query.Set("token", "")
		if _, err := Parse(p, req, nil); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: err = %v, want ErrUnauthenticated", p, err)
		}
	}
}

func TestAuthorizationHeaderForms(t *testing.T) {
	body := load(t, "harbor")
	tests := []struct {
		value string
		ok    bool
	}{
		{"Bearer " + string(testSecret), true},
		{"bearer " + string(testSecret), true},
		{string(testSecret), true},
		{"  Bearer   " + string(testSecret) + " ", true},
		{"Basic " + string(testSecret), false},
		{"Bearer " + string(testSecret) + "x", false},
		{string(testSecret)[:4], false},
		{"Bearer", false},
	}
	for _, tt := range tests {
		_, err := Parse("harbor", signed("harbor", body, header("Authorization", tt.value)), testSecret)
		if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, ErrUnauthenticated)) {
			t.Errorf("Authorization %q: err = %v, want ok=%v", tt.value, err, tt.ok)
		}
	}
}

func TestSignatureHeaderForms(t *testing.T) {
	body := load(t, "generic")
	sig := hexMAC(sha256.New, testSecret, body)
	tests := []struct {
		value string
		ok    bool
	}{
		{"sha256=" + sig, true},
		{"SHA256=" + strings.ToUpper(sig), true},
		{sig, false},
		{"sha1=" + sig, false},
		{"sha256=" + sig[:len(sig)-2], false},
		{"sha256=zz" + sig[2:], false},
		{"sha256=", false},
	}
	for _, tt := range tests {
		_, err := Parse("generic", signed("generic", body, header("X-Signature", tt.value)), testSecret)
		if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, ErrUnauthenticated)) {
			t.Errorf("X-Signature %q: err = %v, want ok=%v", tt.value, err, tt.ok)
		}
	}
}

func TestEventKey(t *testing.T) {
	e, err := newEvent(Event{Source: "dockerhub", Host: "index.docker.io", Repository: "Alpine", Tag: "3.20", DeliveryID: "id"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Host != "docker.io" || e.Repository != "library/alpine" || e.Key() != "docker.io/library/alpine" {
		t.Errorf("event = %+v, key %q", e, e.Key())
	}
}

func TestNewEventValidation(t *testing.T) {
	tests := []struct {
		host, repo, tag, digest string
		ok                      bool
	}{
		{"ghcr.io", "org/app", "v1", "sha256:abc", true},
		{"localhost:5000", "app", "", "", true},
		{"[::1]:5000", "app", "", "", true},
		{"ghcr.io", "", "v1", "", false},
		{"ghcr.io", "org//app", "v1", "", false},
		{"ghcr.io", "org/app-", "v1", "", false},
		{"ghcr.io", "org/a b", "v1", "", false},
		{"bad host", "org/app", "v1", "", false},
		{"ghcr.io/org", "app", "v1", "", false},
		{"ghcr.io/", "org/app", "v1", "", true},
		{"ghcr.io:port", "org/app", "v1", "", false},
		{"ghcr.io", "org/app", "-v1", "", false},
		{"ghcr.io", "org/app", "v1:x", "", false},
		{"ghcr.io", "org/app", strings.Repeat("t", 129), "", false},
		{"ghcr.io", "org/app", "v1", "sha256", false},
		{"ghcr.io", strings.Repeat("a", 250), "v1", "", false},
	}
	for _, tt := range tests {
		_, err := newEvent(Event{Source: "test", Host: tt.host, Repository: tt.repo, Tag: tt.tag, Digest: tt.digest})
		if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, ErrMalformed)) {
			t.Errorf("newEvent(%q, %q, %q, %q) err = %v, want ok=%v", tt.host, tt.repo, tt.tag, tt.digest, err, tt.ok)
		}
	}
}

func TestSplitRef(t *testing.T) {
	tests := []struct {
		in       string
		registry bool
		want     reference
		ok       bool
	}{
		{"ghcr.io/org/app:v1", true, reference{"ghcr.io", "org/app", "v1", ""}, true},
		{"ghcr.io/org/app:", true, reference{"ghcr.io", "org/app", "", ""}, true},
		{"localhost:5000/app@sha256:abc", true, reference{"localhost:5000", "app", "", "sha256:abc"}, true},
		{"https://harbor/lib/app:1@sha256:abc", true, reference{"harbor", "lib/app", "1", "sha256:abc"}, true},
		{"harbor/lib/app", false, reference{"", "harbor/lib/app", "", ""}, true},
		{"alpine:3", false, reference{"", "alpine", "3", ""}, true},
		{"library/alpine:3", false, reference{"", "library/alpine", "3", ""}, true},
		{"localhost/app", false, reference{"localhost", "app", "", ""}, true},
		{"app", true, reference{}, false},
		{"/app", true, reference{}, false},
		{"ghcr.io/", true, reference{}, false},
	}
	for _, tt := range tests {
		got, err := splitRef(tt.in, tt.registry)
		if tt.ok != (err == nil) || (tt.ok && got != tt.want) {
			t.Errorf("splitRef(%q, %v) = %+v, %v; want %+v ok=%v", tt.in, tt.registry, got, err, tt.want, tt.ok)
		}
	}
}
