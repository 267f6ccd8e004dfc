package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// CosignCLI runs the real cosign CLI (`make cosign-cli`, hack/cosign.sh) for a test, in an
// environment of its own: HOME, TUF_ROOT and DOCKER_CONFIG are temporary directories, nothing
// else of the test's environment is passed on, and HTTP_PROXY and HTTPS_PROXY name a listener
// of the test that refuses every request and remembers its host. Go's clients never send
// loopback addresses through a proxy, so the registries on 127.0.0.1 are reached directly and
// a request anywhere else (a TUF repository, Rekor, Fulcio) reaches the listener instead:
// every run fails the test if one did.
type CosignCLI struct {
	bin   string
	env   []string
	guard *outsideGuard
}

// NewCosignCLI finds the cosign binary. A missing one fails the test with the command that
// builds it. Under -short (make unit) the test is skipped: it runs a program built outside the
// test binary.
func NewCosignCLI(t testing.TB) *CosignCLI {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: runs the cosign CLI; run it without -short")
	}
	bin := filepath.Join(BinDir(), "cosign")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the cosign CLI is not built (run make cosign-cli): %v", err)
	}
	dir := t.TempDir()
	for _, d := range []string{"home", "tuf", "docker"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	g := newOutsideGuard(t)
	return &CosignCLI{bin: bin, guard: g, env: []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + filepath.Join(dir, "home"),
		"TUF_ROOT=" + filepath.Join(dir, "tuf"),
		"DOCKER_CONFIG=" + filepath.Join(dir, "docker"),
		"SIGSTORE_NO_CACHE=1",
		"HTTP_PROXY=" + g.srv.URL, "HTTPS_PROXY=" + g.srv.URL, "http_proxy=" + g.srv.URL, "https_proxy=" + g.srv.URL,
		"NO_PROXY=", "no_proxy=",
	}}
}

// CosignCLIKey is a key pair that `cosign generate-key-pair` made, its private half encrypted
// with a password of its own that only the CLI is given.
type CosignCLIKey struct {
	dir, password string
	// PublicPEM is cosign.pub as the CLI wrote it.
	PublicPEM []byte
}

// GenerateKeyPair runs `cosign generate-key-pair` in a temporary directory.
func (c *CosignCLI) GenerateKeyPair(t testing.TB) *CosignCLIKey {
	t.Helper()
	pw := make([]byte, 16)
	if _, err := rand.Read(pw); err != nil {
		t.Fatal(err)
	}
	k := &CosignCLIKey{dir: t.TempDir(), password: hex.EncodeToString(pw)}
	c.run(t, k, "generate-key-pair")
	pub, err := os.ReadFile(filepath.Join(k.dir, "cosign.pub"))
	if err != nil {
		t.Fatalf("cosign generate-key-pair wrote no cosign.pub: %v", err)
	}
	if _, err := os.Stat(filepath.Join(k.dir, "cosign.key")); err != nil {
		t.Fatalf("cosign generate-key-pair wrote no cosign.key: %v", err)
	}
	k.PublicPEM = pub
	return k
}

// CosignCLIFormat is how `cosign sign` stores a signature.
type CosignCLIFormat int

const (
	// CosignBundle is cosign v3's default: a Sigstore bundle (v0.3, a DSSE envelope of an in-toto
	// statement) pushed as an OCI 1.1 referrer of the image, under the referrers tag schema
	// where the registry has no referrers API.
	CosignBundle CosignCLIFormat = iota
	// CosignLegacySig is cosign's earlier form, which v3 writes with --new-bundle-format=false:
	// a simple signing payload under the image's sha256-<hex>.sig tag.
	CosignLegacySig
)

func (f CosignCLIFormat) String() string {
	if f == CosignLegacySig {
		return "legacy .sig tag"
	}
	return "bundle referrer"
}

// Sign runs `cosign sign` of image@digest (image is host:port/repo) with key, writing format.
// It uploads nothing to a transparency log and uses no signing config, so that it needs
// neither Rekor nor the public TUF repository; the registry is reached over plain HTTP.
func (c *CosignCLI) Sign(t testing.TB, key *CosignCLIKey, image, digest string, format CosignCLIFormat) {
	t.Helper()
	args := []string{"sign", "--key", filepath.Join(key.dir, "cosign.key"), "--yes",
		"--tlog-upload=false", "--use-signing-config=false", "--allow-http-registry", "--allow-insecure-registry"}
	if format == CosignLegacySig {
		args = append(args, "--new-bundle-format=false")
	}
	c.run(t, key, append(args, image+"@"+digest)...)
}

// Verify runs `cosign verify` of ref (host:port/repo@digest) with key's public half, offline:
// no transparency log entry is looked for (the signatures of Sign and of a release signed with a
// key and --tlog-upload=false have none), and the registry is reached over plain HTTP.
func (c *CosignCLI) Verify(t testing.TB, key *CosignCLIKey, ref string) {
	t.Helper()
	c.run(t, key, verifyArgs(key, ref)...)
}

// VerifyFails runs Verify's `cosign verify` and fails the test unless cosign refuses ref, as it
// must for a signature of another key.
func (c *CosignCLI) VerifyFails(t testing.TB, key *CosignCLIKey, ref string) {
	t.Helper()
	out, err := c.output(key, verifyArgs(key, ref)...)
	if hosts := c.guard.hosts(); len(hosts) > 0 {
		t.Fatalf("cosign verify tried to reach %s, beyond 127.0.0.1:\n%s", strings.Join(hosts, ", "), out)
	}
	if err == nil {
		t.Fatalf("cosign verify accepted %s with a key that did not sign it:\n%s", ref, out)
	}
}

// VerifyBlob runs `cosign verify-blob` of the file blob against its Sigstore bundle with key's
// public half, offline as Verify is.
func (c *CosignCLI) VerifyBlob(t testing.TB, key *CosignCLIKey, blob, bundle string) {
	t.Helper()
	c.run(t, key, "verify-blob", "--key", filepath.Join(key.dir, "cosign.pub"), "--insecure-ignore-tlog=true",
		"--bundle", bundle, blob)
}

func verifyArgs(key *CosignCLIKey, ref string) []string {
	return []string{"verify", "--key", filepath.Join(key.dir, "cosign.pub"), "--insecure-ignore-tlog=true",
		"--allow-http-registry", "--allow-insecure-registry", ref}
}

// Environ is the part of CosignCLI's environment that keeps cosign to 127.0.0.1 and to the
// test's own directories (the proxies of its guard, TUF_ROOT, DOCKER_CONFIG, no Sigstore cache),
// with the key's password in COSIGN_PASSWORD: for a program of the test that runs cosign itself,
// such as `make release`. Add it after the rest of the environment, so that it wins; PATH and
// HOME are not among it.
func (c *CosignCLI) Environ(key *CosignCLIKey) []string {
	var env []string
	for _, kv := range c.env {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "COSIGN_PASSWORD="+key.password)
}

// Path is the cosign binary.
func (c *CosignCLI) Path() string { return c.bin }

// Reached returns the hosts beyond 127.0.0.1 that a program run with Environ asked for.
func (c *CosignCLI) Reached() []string { return c.guard.hosts() }

// PrivateKey is the file of the key's encrypted private half, cosign.key.
func (k *CosignCLIKey) PrivateKey() string { return filepath.Join(k.dir, "cosign.key") }

// run runs cosign with args in key's directory, the key's password in COSIGN_PASSWORD, and
// fails the test if it fails or tried to reach anything but 127.0.0.1. What it printed is
// shown on failure; neither the password nor the private key is among it.
func (c *CosignCLI) run(t testing.TB, key *CosignCLIKey, args ...string) {
	t.Helper()
	start := time.Now()
	printed, err := c.output(key, args...)
	if hosts := c.guard.hosts(); len(hosts) > 0 {
		t.Fatalf("cosign %s tried to reach %s, beyond 127.0.0.1:\n%s", args[0], strings.Join(hosts, ", "), printed)
	}
	if err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, printed)
	}
	t.Logf("cosign %s: %v", args[0], time.Since(start).Round(time.Millisecond))
}

// output runs cosign with args as run does and returns what it printed, the key's password
// masked, and how it ended.
func (c *CosignCLI) output(key *CosignCLIKey, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = key.dir
	cmd.Env = append(append([]string{}, c.env...), "COSIGN_PASSWORD="+key.password)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.ReplaceAll(out.String(), key.password, "<password>"), err
}

// CosignReplay copies the signature that `cosign sign` stored for image@from, in format, to
// image@to, as someone who may push to the repository but holds no trusted key would: the
// .sig manifest under to's .sig tag, or the bundle referrer with to as its subject. The
// signature itself still names from.
func CosignReplay(t testing.TB, image, from, to string, format CosignCLIFormat) {
	t.Helper()
	repo, err := name.NewRepository(image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	sigTag := func(digest string) name.Tag { return repo.Tag(strings.Replace(digest, ":", "-", 1) + ".sig") }
	if format == CosignLegacySig {
		got, err := remote.Get(sigTag(from))
		if err != nil {
			t.Fatalf("reading the signature of %s@%s: %v", image, from, err)
		}
		if err := remote.Put(sigTag(to), rawManifest{raw: got.Manifest, mediaType: got.MediaType}); err != nil {
			t.Fatalf("copying the signature to %s: %v", sigTag(to), err)
		}
		return
	}
	idx, err := remote.Referrers(repo.Digest(from))
	if err != nil {
		t.Fatalf("listing the referrers of %s@%s: %v", image, from, err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		t.Fatalf("no referrer of %s@%s to copy: %v", image, from, err)
	}
	got, err := remote.Get(repo.Digest(im.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatalf("reading a referrer of %s@%s: %v", image, from, err)
	}
	target, err := remote.Head(repo.Digest(to))
	if err != nil {
		t.Fatalf("resolving %s@%s: %v", image, to, err)
	}
	var m map[string]any
	if err := json.Unmarshal(got.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	m["subject"] = v1.Descriptor{MediaType: target.MediaType, Digest: target.Digest, Size: target.Size}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(repo.Digest(h.String()), rawManifest{raw: raw, mediaType: got.MediaType}); err != nil {
		t.Fatalf("copying the referrer to %s@%s: %v", image, to, err)
	}
}

// outsideGuard is the proxy that CosignCLI's runs are given: it answers every request 403 and
// remembers the host it was for.
type outsideGuard struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newOutsideGuard(t testing.TB) *outsideGuard {
	g := &outsideGuard{}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.seen = append(g.seen, r.Host)
		g.mu.Unlock()
		http.Error(w, "this test reaches nothing beyond 127.0.0.1", http.StatusForbidden)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *outsideGuard) hosts() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}
