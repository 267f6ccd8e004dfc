package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry is an in-process OCI registry (go-containerregistry's pkg/registry) served on
// 127.0.0.1 by net/http/httptest, wrapped in the behaviour of real registries that the bare
// one lacks: paginated tag lists with Link headers, an optional page size limit, basic
// authentication, TLS with a private CA and client certificates. Tests queue faults with
// Inject and read what reached the registry with Requests.
type Registry struct {
	srv     *httptest.Server
	cfg     registryConfig
	pages   *registryPages
	ca      *CA
	clientC []byte
	clientK []byte

	arrived atomic.Int64

	mu       sync.Mutex
	faults   []RegistryFault
	requests []RegistryRequest
}

// RegistryOption configures NewRegistry.
type RegistryOption func(*registryConfig)

type registryConfig struct {
	username, password string
	tls, clientCerts   bool
	aliases            []string
	maxPage            int
	defaultPage        int
	referrers          bool
}

// RegistryReferrers serves the OCI 1.1 referrers API; without it, clients fall back to the
// referrers tag schema (sha256-<hex> tags), as with registries that predate OCI 1.1.
func RegistryReferrers() RegistryOption {
	return func(c *registryConfig) { c.referrers = true }
}

// RegistryBasicAuth makes the registry answer 401 with a Basic challenge to every request that
// does not carry these credentials.
func RegistryBasicAuth(username, password string) RegistryOption {
	return func(c *registryConfig) { c.username, c.password = username, password }
}

// RegistryTLS serves HTTPS with a certificate from the registry's own CA (see CAPEM), valid for
// 127.0.0.1, ::1, localhost and the RegistryAlias names.
func RegistryTLS() RegistryOption {
	return func(c *registryConfig) { c.tls = true }
}

// RegistryClientCerts serves HTTPS and requires a client certificate signed by the registry's
// CA, such as the one of ClientCertPEM and ClientKeyPEM.
func RegistryClientCerts() RegistryOption {
	return func(c *registryConfig) { c.tls, c.clientCerts = true, true }
}

// RegistryAlias gives the registry another host name: its certificate covers it and
// DialContext connects to the registry for it, so a test can reach the registry by a name
// that go-containerregistry does not treat as local (it tries plain HTTP for 127.0.0.1).
func RegistryAlias(hostname string) RegistryOption {
	return func(c *registryConfig) { c.aliases = append(c.aliases, hostname) }
}

// RegistryMaxPageSize makes tag list requests with n above size fail with 400 and the code
// TOO_MANY_TAGS_REQUESTED, as Quay does above 100. Requests without n get pages of size.
func RegistryMaxPageSize(size int) RegistryOption {
	return func(c *registryConfig) { c.maxPage = size }
}

// RegistryDefaultPageSize sets the page size of tag list requests without n; without this
// option (and without RegistryMaxPageSize) they get every tag at once.
func RegistryDefaultPageSize(n int) RegistryOption {
	return func(c *registryConfig) { c.defaultPage = n }
}

// NewRegistry starts a registry for the test and stops it when the test ends.
func NewRegistry(t testing.TB, opts ...RegistryOption) *Registry {
	t.Helper()
	r := &Registry{}
	for _, o := range opts {
		o(&r.cfg)
	}
	inner := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)), ggcrregistry.WithReferrersSupport(r.cfg.referrers))
	r.pages = &registryPages{inner: inner, cfg: &r.cfg, lists: map[string]*registryTagList{}}
	r.srv = httptest.NewUnstartedServer(r.record(r.inject(r.authenticate(r.pages))))
	// Handshakes that tests make fail on purpose would otherwise be logged.
	r.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if r.cfg.tls {
		ca, err := NewCA("testenv registry CA")
		if err != nil {
			t.Fatalf("registry CA: %v", err)
		}
		r.ca = ca
		serving, err := ca.Issue("registry", append([]string{"localhost"}, r.cfg.aliases...), false)
		if err != nil {
			t.Fatalf("registry serving certificate: %v", err)
		}
		r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.Pair}, MinVersion: tls.VersionTLS12}
		if r.cfg.clientCerts {
			r.srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
			r.srv.TLS.ClientCAs = ca.Pool()
		}
		client, err := ca.Issue("reflector", nil, true)
		if err != nil {
			t.Fatalf("registry client certificate: %v", err)
		}
		r.clientC, r.clientK = client.CertPEM, client.KeyPEM
		r.srv.StartTLS()
	} else {
		r.srv.Start()
	}
	t.Cleanup(r.srv.Close)
	return r
}

// Host returns the registry's address, 127.0.0.1:port.
func (r *Registry) Host() string { return r.srv.Listener.Addr().String() }

// HostAs returns the registry's address under a RegistryAlias name, alias:port.
func (r *Registry) HostAs(alias string) string {
	_, port, _ := net.SplitHostPort(r.Host())
	return net.JoinHostPort(alias, port)
}

// Image returns the image name of repo in this registry, such as 127.0.0.1:port/repo.
func (r *Registry) Image(repo string) string { return r.Host() + "/" + repo }

// CAPEM returns the PEM certificate of the CA that signed the registry's serving and client
// certificates; nil without RegistryTLS or RegistryClientCerts.
func (r *Registry) CAPEM() []byte {
	if r.ca == nil {
		return nil
	}
	return r.ca.CertPEM
}

// ClientCertPEM returns a PEM client certificate that the registry accepts under
// RegistryClientCerts; nil without TLS.
func (r *Registry) ClientCertPEM() []byte { return r.clientC }

// ClientKeyPEM returns the PEM private key of ClientCertPEM.
func (r *Registry) ClientKeyPEM() []byte { return r.clientK }

// DialContext dials like net.Dialer, except that the registry's RegistryAlias names lead to the
// registry. Use it as an http.Transport's DialContext.
func (r *Registry) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && slices.Contains(r.cfg.aliases, host) {
		if _, own, _ := net.SplitHostPort(r.Host()); own == port {
			addr = r.Host()
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// Push writes a new random image to repo, tagged with every one of tags, and returns its
// digest. It talks to the registry in-process, bypassing authentication, faults and the request
// log, and tags by storing the manifest once per tag, so tens of thousands of tags take well
// under a second.
func (r *Registry) Push(t testing.TB, repo string, tags ...string) string {
	t.Helper()
	if len(tags) == 0 {
		t.Fatalf("Push %s: no tags", repo)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatalf("random image: %v", err)
	}
	ref, err := name.NewTag(r.Host()+"/"+repo+":"+tags[0], name.Insecure)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	if err := remote.Write(ref, img, remote.WithTransport(registryDirect{r.pages})); err != nil {
		t.Fatalf("Push %s: %v", ref, err)
	}
	manifest, err := img.RawManifest()
	if err != nil {
		t.Fatalf("Push %s: %v", ref, err)
	}
	mediaType, err := img.MediaType()
	if err != nil {
		t.Fatalf("Push %s: %v", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatalf("Push %s: %v", ref, err)
	}
	for _, tag := range tags[1:] {
		req, err := http.NewRequest(http.MethodPut, "/v2/"+repo+"/manifests/"+tag, bytes.NewReader(manifest))
		if err != nil {
			t.Fatalf("tagging %s:%s: %v", repo, tag, err)
		}
		req.Header.Set("Content-Type", string(mediaType))
		rec := httptest.NewRecorder()
		r.pages.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("tagging %s:%s: %d %s", repo, tag, rec.Code, rec.Body)
		}
	}
	return digest.String()
}

// RegistryTags returns n tag names, prefix-0000001 onwards: zero-padded, so that byte order is
// numeric order.
func RegistryTags(prefix string, n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("%s-%07d", prefix, i+1)
	}
	return tags
}

// RegistryFault is a canned answer, or a delay, for the next request that matches it. Build
// one with the Registry* fault functions and narrow it with On.
type RegistryFault struct {
	// Method limits the fault to requests of this method; empty matches any.
	Method string
	// Path limits the fault to requests whose path contains it, such as "/tags/list"; empty
	// matches any.
	Path string
	// Delay is how long to wait before answering.
	Delay time.Duration
	// Hold, when not nil, holds the answer until it is closed (after Delay).
	Hold <-chan struct{}
	// Status is the status of the canned answer; 0 lets the registry answer after Delay.
	Status int
	// Header is added to the canned answer.
	Header http.Header
	// Body is the canned answer's body.
	Body string
	// Stream, when not nil, makes the body what the reader it returns yields instead, for
	// answers too large to hold: it is streamed until the reader ends or the client hangs up.
	Stream func() io.Reader
}

// On returns the fault limited to requests whose path contains path.
func (f RegistryFault) On(path string) RegistryFault {
	f.Path = path
	return f
}

// RegistryTooManyRequests answers 429 TOOMANYREQUESTS with the given Retry-After header (none
// if empty).
func RegistryTooManyRequests(retryAfter string) RegistryFault {
	f := registryErrorFault(http.StatusTooManyRequests, "TOOMANYREQUESTS", "rate limit exceeded")
	if retryAfter != "" {
		f.Header.Set("Retry-After", retryAfter)
	}
	return f
}

// RegistryServerError answers 500 with the code UNKNOWN.
func RegistryServerError() RegistryFault {
	return registryErrorFault(http.StatusInternalServerError, "UNKNOWN", "injected server error")
}

// RegistryUnauthorized answers 401 UNAUTHORIZED.
func RegistryUnauthorized() RegistryFault {
	return registryErrorFault(http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
}

// RegistryNotFound answers 404 NAME_UNKNOWN.
func RegistryNotFound() RegistryFault {
	return registryErrorFault(http.StatusNotFound, "NAME_UNKNOWN", "repository name not known to registry")
}

// RegistryMalformedJSON answers 200 with a JSON body cut short.
func RegistryMalformedJSON() RegistryFault {
	return RegistryFault{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: `{"name":"broken","tags":["v1",`}
}

// RegistrySlow delays the registry's own answer by d, or until the client gives up.
func RegistrySlow(d time.Duration) RegistryFault {
	return RegistryFault{Delay: d}
}

// RegistryHeld holds the registry's own answer until release is closed, or the client gives up.
func RegistryHeld(release <-chan struct{}) RegistryFault {
	return RegistryFault{Hold: release}
}

func registryErrorFault(status int, code, message string) RegistryFault {
	body, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
	return RegistryFault{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: string(body)}
}

// Inject queues faults. Each is used once, by the first later request that matches it; a
// request uses the first matching fault in the queue.
func (r *Registry) Inject(faults ...RegistryFault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, faults...)
}

// RegistryRequest is one request that reached the registry.
type RegistryRequest struct {
	// Method and URI (path and query) of the request.
	Method, URI string
	// Status is the status of the answer.
	Status int
	// Fault tells whether an injected fault answered or delayed it.
	Fault bool
	// Start is when the request arrived, End when its answer was complete.
	Start, End time.Time
}

// Requests returns the requests that reached the registry so far, in order of completion.
// Requests refused during the TLS handshake never reach it.
func (r *Registry) Requests() []RegistryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// RequestCount returns the number of requests that reached the registry so far, counted on
// arrival: unlike Requests, it includes requests still being answered.
func (r *Registry) RequestCount() int { return int(r.arrived.Load()) }

// record logs every request with its status and timing.
func (r *Registry) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.arrived.Add(1)
		rec := &registryRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, req)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.requests = append(r.requests, RegistryRequest{
			Method: req.Method, URI: req.URL.RequestURI(), Status: rec.status,
			Fault: rec.fault, Start: start, End: time.Now(),
		})
	})
}

type registryRecorder struct {
	http.ResponseWriter
	status int
	fault  bool
}

func (w *registryRecorder) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// inject answers with, or delays by, the first queued fault the request matches.
func (r *Registry) inject(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f, ok := r.takeFault(req)
		if !ok {
			next.ServeHTTP(w, req)
			return
		}
		if rec, ok := w.(*registryRecorder); ok {
			rec.fault = true
		}
		if f.Delay > 0 {
			timer := time.NewTimer(f.Delay)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-req.Context().Done():
				return
			}
		}
		if f.Hold != nil {
			select {
			case <-f.Hold:
			case <-req.Context().Done():
				return
			}
		}
		if f.Status == 0 {
			next.ServeHTTP(w, req)
			return
		}
		for k, vs := range f.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(f.Status)
		if f.Stream != nil {
			_, _ = io.Copy(w, f.Stream())
			return
		}
		_, _ = io.WriteString(w, f.Body)
	})
}

func (r *Registry) takeFault(req *http.Request) (RegistryFault, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, f := range r.faults {
		if (f.Method == "" || f.Method == req.Method) && strings.Contains(req.URL.Path, f.Path) {
			r.faults = slices.Delete(r.faults, i, i+1)
			return f, true
		}
	}
	return RegistryFault{}, false
}

// authenticate requires basic credentials when RegistryBasicAuth is set.
func (r *Registry) authenticate(next http.Handler) http.Handler {
	if r.cfg.username == "" && r.cfg.password == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if user, pass, ok := req.BasicAuth(); ok && user == r.cfg.username && pass == r.cfg.password {
			next.ServeHTTP(w, req)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="testenv registry"`)
		registryWriteError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
	})
}

func registryWriteError(w http.ResponseWriter, status int, code, message string) {
	f := registryErrorFault(status, code, message)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, f.Body)
}

// registryPages serves tag lists page by page, as distribution-based registries do: n and last
// select the page, a Link header names the next one. The bare registry ignores last past the
// end and sends no Link. Each repository's sorted tags and encoded pages are kept until a
// manifest of it changes, so a benchmark measures the client, not the server.
type registryPages struct {
	inner http.Handler
	cfg   *registryConfig

	mu    sync.Mutex
	lists map[string]*registryTagList
}

type registryTagList struct {
	tags  []string
	pages map[string][]byte
}

func (p *registryPages) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	repo, isList := strings.CutSuffix(strings.TrimPrefix(req.URL.Path, "/v2/"), "/tags/list")
	if !isList || req.Method != http.MethodGet {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			p.mu.Lock()
			clear(p.lists)
			p.mu.Unlock()
		}
		p.inner.ServeHTTP(w, req)
		return
	}
	n := p.cfg.defaultPage
	if n == 0 {
		n = p.cfg.maxPage
	}
	if s := req.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			registryWriteError(w, http.StatusBadRequest, "PAGINATION_NUMBER_INVALID", fmt.Sprintf("invalid page size %q", s))
			return
		}
		n = v
	}
	if p.cfg.maxPage > 0 && n > p.cfg.maxPage {
		registryWriteError(w, http.StatusBadRequest, "TOO_MANY_TAGS_REQUESTED",
			fmt.Sprintf("requested %d tags, the maximum is %d", n, p.cfg.maxPage))
		return
	}
	list, ok := p.list(w, repo)
	if !ok {
		return
	}
	last := req.URL.Query().Get("last")
	key := last + "\x00" + strconv.Itoa(n)
	p.mu.Lock()
	body, cached := list.pages[key]
	p.mu.Unlock()
	start := sort.Search(len(list.tags), func(i int) bool { return list.tags[i] > last })
	end := len(list.tags)
	if n > 0 || req.URL.Query().Has("n") {
		end = min(start+n, end)
	}
	if !cached {
		body, _ = json.Marshal(struct {
			Name string   `json:"name"`
			Tags []string `json:"tags"`
		}{repo, list.tags[start:end]})
		p.mu.Lock()
		list.pages[key] = body
		p.mu.Unlock()
	}
	if end < len(list.tags) && end > start {
		q := url.Values{"last": {list.tags[end-1]}, "n": {strconv.Itoa(n)}}
		w.Header().Set("Link", fmt.Sprintf(`</v2/%s/tags/list?%s>; rel="next"`, repo, q.Encode()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// list returns repo's sorted tags, asking the bare registry for them after a change. A failure
// is written to w as the registry answered it.
func (p *registryPages) list(w http.ResponseWriter, repo string) (*registryTagList, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.lists[repo]; ok {
		return l, true
	}
	rec := httptest.NewRecorder()
	p.inner.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v2/"+repo+"/tags/list", nil))
	if rec.Code != http.StatusOK {
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return nil, false
	}
	var all struct {
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &all); err != nil {
		registryWriteError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return nil, false
	}
	l := &registryTagList{tags: all.Tags, pages: map[string][]byte{}}
	p.lists[repo] = l
	return l, true
}

// registryDirect is a RoundTripper that hands requests to a handler in-process.
type registryDirect struct{ h http.Handler }

func (d registryDirect) RoundTrip(req *http.Request) (*http.Response, error) {
	in := req
	if req.Body == nil {
		// Handlers expect a server request, whose Body is never nil.
		in = req.Clone(req.Context())
		in.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	d.h.ServeHTTP(rec, in)
	out := rec.Result()
	out.Request = req
	return out, nil
}

// Transport reaches the registry in-process, without its listener, as the registry's own
// pushes do.
func (r *Registry) Transport() http.RoundTripper { return registryDirect{r.pages} }

// ImageDigest returns the manifest digest that repo:tag points to.
func (r *Registry) ImageDigest(t testing.TB, repo, tag string) string {
	t.Helper()
	ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", r.Host(), repo, tag), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(ref, remote.WithTransport(registryDirect{r.pages}))
	if err != nil {
		t.Fatalf("HEAD %s: %v", ref, err)
	}
	return d.Digest.String()
}

// rawManifest is a manifest to push as it is.
type rawManifest struct {
	raw       []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }
