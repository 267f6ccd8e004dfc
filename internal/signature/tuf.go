package signature

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tuf"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// DefaultTUFURL is the Sigstore public-good TUF repository, whose trusted root verifies keyless
// signatures made with the public-good Fulcio and Rekor (what `cosign sign` uses by default).
const DefaultTUFURL = tuf.DefaultMirror

// The environment of the policy function that configures the TUF repository (TUFFromEnv).
const (
	// EnvTUFURL is the base URL of the TUF repository, a mirror of the public-good one or a
	// private deployment's; the public-good repository when unset.
	EnvTUFURL = "REFLECTOR_SIGSTORE_TUF_URL"
	// EnvTUFRoot is the path of the repository's initial root.json, the trust anchor that TUF
	// walks forward from; when unset, the public-good root that sigstore-go embeds.
	EnvTUFRoot = "REFLECTOR_SIGSTORE_TUF_ROOT"
	// EnvTUFCache is a writable directory where the TUF client keeps the metadata and the
	// trusted root it verified, so that a restarted container need not fetch them again within
	// their validity; when unset, they are kept in memory only.
	EnvTUFCache = "REFLECTOR_SIGSTORE_TUF_CACHE"
)

const (
	// trustedRootTarget is the TUF target that holds the Sigstore trusted root.
	trustedRootTarget = "trusted_root.json"
	// tufValidity is how long a fetched trusted root is used before TUF is asked again, the
	// cache validity of sigstore-go's client (in days there), as cosign's is: the root changes
	// rarely and with notice, and a key or log removed from it is dropped within a day.
	tufValidity      = 24 * time.Hour
	tufValidityDays  = 1
	tufRetryAfter    = 30 * time.Second
	tufRequestLimit  = 10 * time.Second
	tufRefreshLimit  = 30 * time.Second
	maxTUFFileBytes  = 1 << 20
	maxTUFRequests   = 64
	maxTUFReadBytes  = 8 << 20
	maxTUFRootBytes  = 512000
	maxTUFURLLength  = 1024
	tufUserAgent     = "reflector-policy"
	tufErrorMaxChars = 300
)

// TUFConfig says where a TUFRoot fetches the trusted root from.
type TUFConfig struct {
	// URL is the TUF repository's base URL; DefaultTUFURL when empty.
	URL string
	// Root is the repository's initial root.json; the public-good one when empty.
	Root []byte
	// CacheDir is where the TUF client keeps what it fetched; memory only when empty.
	CacheDir string
}

// TUFRoot fetches a Sigstore trusted root (the target trusted_root.json) from a TUF repository,
// by default the public-good one, for keyless verification of a spec.verify without a
// secretRef. It fetches on first need, not when made, keeps what it fetched for a day (then
// asks the repository again, as TUF's client workflow does each time it is run), and after a
// failure waits half a minute before it tries again, so that many policies do not each wait on
// an unreachable repository. One TUFRoot serves a whole process; it is safe for concurrent use.
type TUFRoot struct {
	url   string
	opts  tuf.Options
	fetch *tufFetcher
	now   func() time.Time

	mu     sync.Mutex
	client *tuf.Client
	cur    *trustedRoot
	err    error
	failed time.Time
}

// trustedRoot is a trusted root as fetched: parsed, and the SHA-256 of its bytes, which
// Verifier IDs name.
type trustedRoot struct {
	root  *root.TrustedRoot
	sum   [sha256.Size]byte
	until time.Time
}

// TUFError is the error of New when the trusted root of the TUF repository could not be had:
// the repository did not answer, or TUF refused what it answered (a bad signature, expired
// metadata, a target whose hash does not match). It is no verdict on any image, and a later
// attempt may succeed. It names the repository and never quotes what it served.
type TUFError struct {
	URL string
	Err error
}

func (e *TUFError) Error() string {
	return fmt.Sprintf("the Sigstore trusted root could not be fetched from the TUF repository %s: %s",
		e.URL, truncate(e.Err.Error(), tufErrorMaxChars))
}

func (e *TUFError) Unwrap() error { return e.Err }

// Transient tells that a later attempt may succeed: the error is not about the spec.
func (e *TUFError) Transient() bool { return true }

// NewTUFRoot returns the TUFRoot of cfg. It reads nothing from the network.
func NewTUFRoot(cfg TUFConfig) (*TUFRoot, error) {
	u := DefaultTUFURL
	if cfg.URL != "" {
		var err error
		if u, err = ParseTUFURL(cfg.URL); err != nil {
			return nil, err
		}
	}
	initial := cfg.Root
	if len(initial) == 0 {
		initial = tuf.DefaultRoot()
	}
	if len(initial) > maxTUFRootBytes {
		return nil, fmt.Errorf("the initial TUF root is %d bytes, more than %d", len(initial), maxTUFRootBytes)
	}
	if _, err := (&metadata.Metadata[metadata.RootType]{}).FromBytes(initial); err != nil {
		return nil, fmt.Errorf("the initial TUF root is not TUF root metadata: %s", truncate(err.Error(), 200))
	}
	f := &tufFetcher{client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	r := &TUFRoot{url: u, fetch: f, now: time.Now, opts: tuf.Options{
		Root:              initial,
		RepositoryBaseURL: u,
		Fetcher:           f,
	}}
	if cfg.CacheDir == "" {
		r.opts.DisableLocalCache = true
	} else {
		r.opts.CachePath = cfg.CacheDir
		r.opts.CacheValidity = tufValidityDays
	}
	return r, nil
}

// TUFFromEnv returns the TUFRoot that EnvTUFURL, EnvTUFRoot and EnvTUFCache describe: the
// public-good repository, its root embedded in sigstore-go and no disk cache when none is set.
func TUFFromEnv() (*TUFRoot, error) {
	cfg := TUFConfig{URL: strings.TrimSpace(os.Getenv(EnvTUFURL)), CacheDir: strings.TrimSpace(os.Getenv(EnvTUFCache))}
	if path := strings.TrimSpace(os.Getenv(EnvTUFRoot)); path != "" {
		b, err := readBounded(path, maxTUFRootBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvTUFRoot, err)
		}
		cfg.Root = b
	}
	r, err := NewTUFRoot(cfg)
	if err != nil {
		return nil, fmt.Errorf("the Sigstore TUF repository of %s and %s: %w", EnvTUFURL, EnvTUFRoot, err)
	}
	return r, nil
}

// readBounded reads the file path, at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// ParseTUFURL checks the base URL of a TUF repository and returns it without a trailing slash:
// http or https, a host, and nothing that could be a credential (userinfo, a query, a
// fragment), since errors and status messages name it. TUF signs what the repository serves,
// so plain http is as safe as https against tampering; it is allowed for mirrors inside a
// cluster.
func ParseTUFURL(s string) (string, error) {
	if len(s) > maxTUFURLLength {
		return "", fmt.Errorf("the TUF repository URL is longer than %d bytes", maxTUFURLLength)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", errors.New("the TUF repository URL does not parse")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return "", errors.New("the TUF repository URL must be http or https")
	case u.Host == "" || u.Opaque != "":
		return "", errors.New("the TUF repository URL has no host")
	case u.User != nil:
		return "", errors.New("the TUF repository URL must not carry credentials")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#"):
		return "", errors.New("the TUF repository URL must have no query or fragment")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// URL is the TUF repository's base URL.
func (r *TUFRoot) URL() string { return r.url }

// trusted returns the trusted root, fetching it when there is none or it is older than
// tufValidity. Its errors are *TUFError.
func (r *TUFRoot) trusted() (*trustedRoot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if r.cur != nil && now.Before(r.cur.until) {
		return r.cur, nil
	}
	if r.err != nil && now.Sub(r.failed) < tufRetryAfter {
		return nil, r.err
	}
	cur, err := r.refresh()
	if err != nil {
		// A root past its validity is not used any longer, as sigstore-go does not: TUF's
		// expiry and revocation work only if clients do ask.
		r.cur, r.err, r.failed = nil, &TUFError{URL: r.url, Err: err}, now
		return nil, r.err
	}
	cur.until = now.Add(tufValidity)
	if last := r.lastRefresh(); !last.IsZero() && last.Add(tufValidity).Before(cur.until) {
		// Read from the disk cache, which a process before this one refreshed: valid no
		// longer than that refresh allows.
		cur.until = last.Add(tufValidity)
	}
	r.cur, r.err = cur, nil
	return cur, nil
}

// lastRefresh is when the disk cache was last refreshed from the repository, as sigstore-go's
// client records it; zero without a disk cache or a record.
func (r *TUFRoot) lastRefresh() time.Time {
	if r.opts.DisableLocalCache {
		return time.Time{}
	}
	b, err := readBounded(filepath.Join(r.opts.CachePath, tuf.URLToPath(r.url)+".json"), 4<<10)
	var cfg tuf.Config
	if err != nil || json.Unmarshal(b, &cfg) != nil {
		return time.Time{}
	}
	return cfg.LastTimestamp
}

// refresh runs TUF's client workflow and reads the trusted root target. The first time, the
// client starts from the disk cache, where there is one within its validity, without a request.
func (r *TUFRoot) refresh() (*trustedRoot, error) {
	r.fetch.start(time.Now().Add(tufRefreshLimit))
	if r.client == nil {
		// tuf.New keeps and changes its options: each client gets its own copy.
		opts := r.opts
		c, err := tuf.New(&opts)
		if err != nil {
			return nil, err
		}
		r.client = c
	} else if err := r.client.Refresh(); err != nil {
		return nil, err
	}
	data, err := r.client.GetTarget(trustedRootTarget)
	if err != nil {
		return nil, err
	}
	if len(data) > maxTrustedRootBytes {
		return nil, fmt.Errorf("its %s is %d bytes, more than %d", trustedRootTarget, len(data), maxTrustedRootBytes)
	}
	tr, err := root.NewTrustedRootFromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("its %s is not a Sigstore trusted root: %s", trustedRootTarget, truncate(err.Error(), 200))
	}
	return &trustedRoot{root: tr, sum: sha256.Sum256(data)}, nil
}

// tufFetcher is the go-tuf Fetcher of a TUFRoot: each download bounded in size (the least of
// what TUF expects and maxTUFFileBytes) and time, and each refresh in requests, bytes and time,
// so that a repository that answers slowly or without end, or walks the client through many
// root versions, costs little.
type tufFetcher struct {
	client *http.Client

	mu       sync.Mutex
	deadline time.Time
	requests int
	read     int64
}

// start begins a refresh that must end by deadline.
func (f *tufFetcher) start(deadline time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deadline, f.requests, f.read = deadline, 0, 0
}

// DownloadFile implements go-tuf's fetcher.Fetcher. A status other than 200 is
// *metadata.ErrDownloadHTTP, which TUF reads (a 404 for the next root version ends the walk),
// and a body longer than allowed *metadata.ErrDownloadLengthMismatch.
func (f *tufFetcher) DownloadFile(u string, maxLength int64, _ time.Duration) ([]byte, error) {
	f.mu.Lock()
	if f.requests >= maxTUFRequests {
		f.mu.Unlock()
		return nil, fmt.Errorf("more than %d requests in one refresh", maxTUFRequests)
	}
	f.requests++
	deadline := f.deadline
	f.mu.Unlock()
	limit := int64(maxTUFFileBytes)
	if maxLength > 0 && maxLength < limit {
		limit = maxLength
	}
	if d := time.Now().Add(tufRequestLimit); d.Before(deadline) || deadline.IsZero() {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", tufUserAgent)
	res, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, &metadata.ErrDownloadHTTP{StatusCode: res.StatusCode, URL: u}
	}
	if res.ContentLength > limit {
		return nil, &metadata.ErrDownloadLengthMismatch{Msg: fmt.Sprintf("%s is %d bytes, more than %d", u, res.ContentLength, limit)}
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &metadata.ErrDownloadLengthMismatch{Msg: fmt.Sprintf("%s is more than %d bytes", u, limit)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.read += int64(len(data)); f.read > maxTUFReadBytes {
		return nil, fmt.Errorf("more than %d bytes in one refresh", maxTUFReadBytes)
	}
	return data, nil
}
