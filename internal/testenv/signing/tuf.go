package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// TUFRepository is a TUF repository made for a test with go-tuf's metadata package, served
// over HTTP on 127.0.0.1 by net/http/httptest, as the Sigstore public-good one is laid out:
// consistent snapshots, versioned root, snapshot and targets metadata, an unversioned
// timestamp, and targets under targets/<sha256>.<name>. Each top-level role has its own
// Ed25519 key.
type TUFRepository struct {
	srv  *httptest.Server
	keys map[string]ed25519.PrivateKey
	root []byte

	mu       sync.Mutex
	files    map[string][]byte
	targets  map[string][]byte
	version  int64
	requests []string
	down     bool
}

// NewTUFRepository starts a TUF repository whose targets are targets.
func NewTUFRepository(t testing.TB, targets map[string][]byte) *TUFRepository {
	t.Helper()
	r := &TUFRepository{keys: map[string]ed25519.PrivateKey{}, files: map[string][]byte{}, targets: map[string][]byte{}}
	root := metadata.Root(time.Now().Add(365 * 24 * time.Hour))
	for _, role := range []string{metadata.ROOT, metadata.TIMESTAMP, metadata.SNAPSHOT, metadata.TARGETS} {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key, err := metadata.KeyFromPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		if err := root.Signed.AddKey(key, role); err != nil {
			t.Fatal(err)
		}
		r.keys[role] = priv
	}
	r.root = signed(t, root, r.keys[metadata.ROOT])
	r.files["1.root.json"] = r.root
	for name, data := range targets {
		r.targets[name] = data
	}
	r.publish(t)
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// signed returns meta signed with key, as a file of the repository holds it.
func signed[T metadata.Roles](t testing.TB, meta *metadata.Metadata[T], key ed25519.PrivateKey) []byte {
	t.Helper()
	s, err := signature.LoadED25519Signer(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meta.Sign(s); err != nil {
		t.Fatal(err)
	}
	b, err := meta.ToBytes(false)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// publish writes a new version of the targets, snapshot and timestamp metadata for r.targets.
// Called with r.mu held, or before serving.
func (r *TUFRepository) publish(t testing.TB) {
	t.Helper()
	r.version++
	expires := time.Now().Add(365 * 24 * time.Hour)
	targets := metadata.Targets(expires)
	targets.Signed.Version = r.version
	for name, data := range r.targets {
		tf, err := metadata.TargetFile().FromBytes(name, data, "sha256")
		if err != nil {
			t.Fatal(err)
		}
		targets.Signed.Targets[name] = tf
		r.files["targets/"+hex.EncodeToString(tf.Hashes["sha256"])+"."+name] = data
	}
	v := strconv.FormatInt(r.version, 10)
	r.files[v+".targets.json"] = signed(t, targets, r.keys[metadata.TARGETS])
	snapshot := metadata.Snapshot(expires)
	snapshot.Signed.Version = r.version
	snapshot.Signed.Meta["targets.json"] = metadata.MetaFile(r.version)
	r.files[v+".snapshot.json"] = signed(t, snapshot, r.keys[metadata.SNAPSHOT])
	timestamp := metadata.Timestamp(expires)
	timestamp.Signed.Version = r.version
	timestamp.Signed.Meta["snapshot.json"] = metadata.MetaFile(r.version)
	r.files["timestamp.json"] = signed(t, timestamp, r.keys[metadata.TIMESTAMP])
}

// URL is the repository's base URL.
func (r *TUFRepository) URL() string { return r.srv.URL }

// RootJSON is the repository's root metadata, the trust anchor a client starts from.
func (r *TUFRepository) RootJSON() []byte { return r.root }

// SetTarget publishes data as the target name in a new version of the repository, as a
// rotation of the Sigstore trusted root does.
func (r *TUFRepository) SetTarget(t testing.TB, name string, data []byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets[name] = data
	r.publish(t)
}

// Target returns the bytes of the target name as published.
func (r *TUFRepository) Target(t testing.TB, name string) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	data, ok := r.targets[name]
	if !ok {
		t.Fatalf("the TUF repository has no target %q", name)
	}
	return data
}

// SignTimestampWithOtherKey publishes a new version whose timestamp metadata is signed with a
// key that the root does not trust for it.
func (r *TUFRepository) SignTimestampWithOtherKey(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publish(t)
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := (&metadata.Metadata[metadata.TimestampType]{}).FromBytes(r.files["timestamp.json"])
	if err != nil {
		t.Fatal(err)
	}
	ts.ClearSignatures()
	r.files["timestamp.json"] = signed(t, ts, other)
}

// TamperTarget replaces the served bytes of the target name, leaving its metadata as it is.
func (r *TUFRepository) TamperTarget(t testing.TB, name string, data []byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for path := range r.files {
		if strings.HasPrefix(path, "targets/") && strings.HasSuffix(path, "."+name) {
			r.files[path] = data
		}
	}
}

// SetDown makes the repository answer every request with 503, or serve again.
func (r *TUFRepository) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// Requests returns the paths requested so far.
func (r *TUFRepository) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

func (r *TUFRepository) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	path := strings.TrimPrefix(req.URL.Path, "/")
	r.requests = append(r.requests, path)
	data, ok := r.files[path]
	down := r.down
	r.mu.Unlock()
	switch {
	case down:
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	case req.Method != http.MethodGet:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	case !ok:
		http.NotFound(w, req)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	}
}
