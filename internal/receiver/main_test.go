package receiver_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is a real apiserver, registry, Badger store and Scanner, with a Receiver served over
// real HTTP: webhooks under /hook/, CloudEvents at /.
type fixture struct {
	env     *testenv.Env
	kube    *kube.Client
	reg     *testenv.Registry
	store   *store.Store
	scanner *reconcile.Scanner
	recv    *receiver.Receiver
	srv     *httptest.Server
	logs    *testenv.LogBuffer
	// lists counts the ImageRepository list calls the fixture's clients made, and reads their
	// reads of one ImageRepository.
	lists, reads atomic.Int64
}

// newFixture starts the fixture. Its registry client dials the test registry for every host,
// so the vendors' payloads can keep their own registry hosts (ghcr.io, quay.io, ...) and
// their ImageRepositories still scan the test registry, over plain HTTP (spec.insecure).
func newFixture(t testing.TB, opts ...receiver.Option) *fixture {
	t.Helper()
	env := testenv.Kube(t)
	f := &fixture{env: env, reg: testenv.NewRegistry(t), store: store.New(t.TempDir()), logs: &testenv.LogBuffer{}}
	// Counts the ImageRepository list calls and reads.
	c := env.ClientSeeing(t, nil, func(req *http.Request) {
		if req.Method != http.MethodGet {
			return
		}
		path := strings.TrimSuffix(req.URL.Path, "/")
		switch {
		case strings.HasSuffix(path, "/"+v1.ImageRepositoryResource):
			f.lists.Add(1)
		case strings.Contains(path, "/"+v1.ImageRepositoryResource+"/"):
			f.reads.Add(1)
		}
	})
	f.kube = c
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, f.reg.Host())
	}
	log := slog.New(slog.NewJSONHandler(f.logs, nil))
	f.scanner = &reconcile.Scanner{
		Kube:     c,
		Registry: registry.New(registry.WithRateLimit(0, 0), registry.WithTransport(tr), registry.WithRetries(0, 0, 0)),
		Store:    f.store,
		Log:      log,
	}
	// Tests create a namespace's receiver and use it at once: list the receivers' Secrets for
	// every delivery, rather than once per DefaultSecretTTL.
	f.recv = receiver.New(c, f.scanner, append([]receiver.Option{receiver.WithLogger(log), receiver.WithSecretTTL(0)}, opts...)...)
	mux := http.NewServeMux()
	mux.Handle("/hook/", f.recv)
	mux.Handle("/", f.recv.CloudEvents())
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.recv.Shutdown(ctx)
		f.store.Close()
	})
	return f
}

// namespace creates a namespace whose receiver has token, or no receiver when token is "".
func (f *fixture) namespace(t testing.TB, token string) string {
	t.Helper()
	ns := f.env.Namespace(t)
	if token != "" {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: receiver.SecretName},
			Data:       map[string][]byte{receiver.SecretKey: []byte(token)},
		}
		if _, err := f.kube.Secrets.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

func (f *fixture) createRepo(t testing.TB, ns, name, image string, mutate ...func(*v1.ImageRepository)) {
	t.Helper()
	r := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.ImageRepositorySpec{Image: image, Interval: metav1.Duration{Duration: time.Hour}, Insecure: true},
	}
	for _, m := range mutate {
		m(r)
	}
	if _, err := f.kube.Repositories.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) get(t testing.TB, ns, name string) *v1.ImageRepository {
	t.Helper()
	r, err := f.kube.Repositories.Get(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) annotation(t testing.TB, ns, name string) string {
	t.Helper()
	return f.get(t, ns, name).Annotations[v1.ReconcileRequestAnnotation]
}

// waitTag waits until the status of ns/name lists tag, and returns the object.
func (f *fixture) waitTag(t testing.TB, ns, name, tag string) *v1.ImageRepository {
	t.Helper()
	var r *v1.ImageRepository
	testenv.Eventually(t, 30*time.Second, func() error {
		r = f.get(t, ns, name)
		if r.Status.LastScanResult == nil || !slices.Contains(r.Status.LastScanResult.LatestTags, tag) {
			return fmt.Errorf("%s/%s: tag %s not in the status; status %+v", ns, name, tag, r.Status)
		}
		return nil
	})
	return r
}

// tagListings counts the tag list requests that reached the registry for repo ("" for all).
func (f *fixture) tagListings(repo string) int {
	n := 0
	for _, r := range f.reg.Requests() {
		if strings.Contains(r.URI, "/tags/list") && (repo == "" || strings.Contains(r.URI, "/v2/"+repo+"/tags/list")) {
			n++
		}
	}
	return n
}

// delivery is one webhook request.
type delivery struct {
	path   string
	body   []byte
	header http.Header
	query  url.Values
	method string
}

// signed builds the request that provider's sender makes for body with token, including the
// non-secret headers it always sets.
func signed(provider, path, token string, body []byte) delivery {
	d := delivery{path: path, body: body, header: http.Header{}, query: url.Values{}}
	mac := func(h func() hash.Hash) string {
		m := hmac.New(h, []byte(token))
		m.Write(body)
		return hex.EncodeToString(m.Sum(nil))
	}
	switch provider {
	case "github":
		d.header.Set("X-GitHub-Event", "package")
		d.header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		d.header.Set("X-Hub-Signature-256", "sha256="+mac(sha256.New))
	case "nexus":
		d.header.Set("X-Nexus-Webhook-ID", "rm:repository:component")
		d.header.Set("X-Nexus-Webhook-Delivery", "7f69e7c0-6e43-4c1c-a4d3-1f7c3e4d1b2a")
		d.header.Set("X-Nexus-Webhook-Signature", mac(sha1.New))
		d.query.Set("host", "nexus.example.com:8082")
	case "jfrog":
		d.header.Set("X-JFrog-Event-Auth", mac(sha256.New))
	case "harbor", "acr", "distribution", "ecr", "eventgrid":
		d.header.Set("Authorization", "Bearer "+token)
	case "dockerhub", "quay", "gar":
		d.query.Set("token", token)
	case "generic":
		d.header.Set("X-Signature", "sha256="+mac(sha256.New))
	default:
		panic("no request for provider " + provider)
	}
	return d
}

// send posts d (or sends it with d.method) and decodes the answer.
func (f *fixture) send(t testing.TB, d delivery) (int, receiver.Answer) {
	t.Helper()
	u := f.srv.URL + d.path
	if len(d.query) > 0 {
		u += "?" + d.query.Encode()
	}
	method := d.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, u, bytes.NewReader(d.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range d.header {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a receiver.Answer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s %s: answer %d is not JSON: %q", method, d.path, resp.StatusCode, b)
	}
	return resp.StatusCode, a
}

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "webhook", "testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// logLines returns the logged lines whose message is msg, decoded.
func logLines(b *testenv.LogBuffer, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
