package signature_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/signature"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/signing"
)

// publicGoodSpec is a keyless spec.verify without a secretRef, as for the public-good Sigstore.
func publicGoodSpec(ids ...v1.OIDCIdentityMatch) *v1.OCIRepositoryVerification {
	return &v1.OCIRepositoryVerification{Provider: "cosign", MatchOIDCIdentity: ids}
}

var ciIdentity = v1.OIDCIdentityMatch{Issuer: "^" + ciIssuer + "$", Subject: "^https://github.com/org/app/.github/workflows/release.yaml@refs/.*$"}

// tufFromEnv points the policy function's environment at repo, with a cache directory of its
// own, and returns the TUFRoot that environment gives, as the policy function makes it.
func tufFromEnv(t *testing.T, repo *signing.TUFRepository, cache string) *signature.TUFRoot {
	t.Helper()
	rootFile := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(rootFile, repo.RootJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(signature.EnvTUFURL, repo.URL())
	t.Setenv(signature.EnvTUFRoot, rootFile)
	t.Setenv(signature.EnvTUFCache, cache)
	r, err := signature.TUFFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// clock is a time a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestIntegrationVerifyPublicGood verifies keyless signatures without a secretRef under the
// trusted root of a TUF repository made for the test, in place of the public-good one: the
// identity is checked as with a Secret's root, the root is fetched once per process and
// validity, and a new process finds it in the disk cache.
func TestIntegrationVerifyPublicGood(t *testing.T) {
	sigstore := signing.NewSigstore(t)
	repo := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": sigstore.TrustedRootWithoutCTJSON(t)})
	cache := t.TempDir()
	tr := tufFromEnv(t, repo, cache)
	reg := testenv.NewRegistry(t)
	good := reg.Push(t, "app", "1.0.0")
	signing.Keyless(t, signing.In(reg, "app", good), sigstore.Identity(ciSubject, ciIssuer))
	fork := reg.Push(t, "app", "1.1.0")
	signing.Keyless(t, signing.In(reg, "app", fork), sigstore.Identity("https://github.com/fork/app/.github/workflows/release.yaml@refs/heads/main", ciIssuer))
	other := reg.Push(t, "app", "1.2.0")
	signing.Keyless(t, signing.In(reg, "app", other), signing.NewSigstore(t).Identity(ciSubject, ciIssuer))
	repoRef, _ := name.NewRepository(reg.Image("app"), name.Insecure)

	if n := len(repo.Requests()); n != 0 {
		t.Fatalf("%d TUF requests before any verification, want none", n)
	}
	v, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr))
	if err != nil {
		t.Fatal(err)
	}
	fetched := len(repo.Requests())
	t.Logf("TUF requests of the first fetch: %v", repo.Requests())
	for _, tt := range []struct {
		digest string
		ok     bool
		reason string
	}{
		{good, true, ""},
		{fork, false, "signed by https://github.com/fork/app/.github/workflows/release.yaml@refs/heads/main (issuer " + ciIssuer + ") that matchOIDCIdentity does not match"},
		{other, false, "no signature bundle verifies under the trusted root"},
	} {
		ok, reason, err := v.Verify(context.Background(), repoRef, tt.digest)
		if err != nil || ok != tt.ok || !strings.Contains(reason, tt.reason) {
			t.Errorf("Verify(%s) = %v, %q, %v; want %v, %q", tt.digest, ok, reason, err, tt.ok, tt.reason)
		}
	}

	// The next policy's verifier, in the same process, asks the repository nothing.
	again, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID() != v.ID() {
		t.Errorf("the same spec and root give IDs %s and %s", v.ID(), again.ID())
	}
	if n := len(repo.Requests()); n != fetched {
		t.Errorf("a second verifier made %d more TUF requests, want none", n-fetched)
	}
	// The same root from a Secret gives the same ID: the same trust, the same verdicts.
	fromSecret, err := signature.New(keylessSpec(ciIdentity), map[string][]byte{signature.TrustedRootKey: trustedRootOf(t, repo)})
	if err != nil {
		t.Fatal(err)
	}
	if fromSecret.ID() != v.ID() {
		t.Errorf("the same root from a Secret gives ID %s, from TUF %s", fromSecret.ID(), v.ID())
	}

	// A process started later finds the metadata and the root in the disk cache...
	restarted := tufFromEnv(t, repo, cache)
	c := &clock{now: time.Now().Add(23 * time.Hour)}
	signature.SetTUFClock(restarted, c.Now)
	if _, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(restarted)); err != nil {
		t.Fatal(err)
	}
	if n := len(repo.Requests()); n != fetched {
		t.Errorf("a restarted process with the disk cache made %d TUF requests, want none", n-fetched)
	}
	// ... and uses it no longer than a day after the refresh that wrote it.
	c.advance(2 * time.Hour)
	if _, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(restarted)); err != nil {
		t.Fatal(err)
	}
	if n := len(repo.Requests()); n == fetched {
		t.Error("a day after the disk cache's refresh, the repository was not asked")
	}
}

// trustedRootOf returns the trusted_root.json that repo serves, read as a client does.
func trustedRootOf(t *testing.T, repo *signing.TUFRepository) []byte {
	t.Helper()
	return repo.Target(t, "trusted_root.json")
}

// TestIntegrationVerifyPublicGoodRequiresSCT serves a root that lists a certificate
// transparency log, as the public-good one does: a certificate without a signed certificate
// timestamp, as the test Sigstore issues them, does not verify.
func TestIntegrationVerifyPublicGoodRequiresSCT(t *testing.T) {
	sigstore := signing.NewSigstore(t)
	repo := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": sigstore.TrustedRootJSON(t)})
	reg := testenv.NewRegistry(t)
	d := reg.Push(t, "app", "1.0.0")
	signing.Keyless(t, signing.In(reg, "app", d), sigstore.Identity(ciSubject, ciIssuer))
	v, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tufFromEnv(t, repo, t.TempDir())))
	if err != nil {
		t.Fatal(err)
	}
	repoRef, _ := name.NewRepository(reg.Image("app"), name.Insecure)
	ok, reason, err := v.Verify(context.Background(), repoRef, d)
	if err != nil || ok || !strings.Contains(reason, "no signature bundle verifies under the trusted root") {
		t.Fatalf("Verify() = %v, %q, %v; want a refusal", ok, reason, err)
	}
	// Under the same root from a Secret, as before, no timestamp is required.
	withSecret, err := signature.New(keylessSpec(ciIdentity), map[string][]byte{signature.TrustedRootKey: trustedRootOf(t, repo)})
	if err != nil {
		t.Fatal(err)
	}
	if withSecret.ID() == v.ID() {
		t.Error("verifiers that require a timestamp and that do not have the same ID")
	}
	if ok, reason, err := withSecret.Verify(context.Background(), repoRef, d); !ok || err != nil {
		t.Fatalf("Verify() with the Secret's root = %v, %q, %v", ok, reason, err)
	}
}

// TestIntegrationVerifyPublicGoodRotation publishes a new trusted root: within the validity of
// the one fetched, nothing is asked; past it, the new root is fetched and the ID changes, so
// that remembered verdicts are not reused.
func TestIntegrationVerifyPublicGoodRotation(t *testing.T) {
	sigstore := signing.NewSigstore(t)
	repo := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": sigstore.TrustedRootWithoutCTJSON(t)})
	// Memory only: no disk cache.
	tr := tufFromEnv(t, repo, "")
	c := &clock{now: time.Now()}
	signature.SetTUFClock(tr, c.Now)
	first, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr))
	if err != nil {
		t.Fatal(err)
	}
	fetched := len(repo.Requests())

	next := signing.NewSigstore(t)
	repo.SetTarget(t, "trusted_root.json", next.TrustedRootWithoutCTJSON(t))
	c.advance(23 * time.Hour)
	same, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr))
	if err != nil {
		t.Fatal(err)
	}
	if same.ID() != first.ID() || len(repo.Requests()) != fetched {
		t.Fatalf("within the validity: ID %s (was %s), %d more requests; want the same ID and none", same.ID(), first.ID(), len(repo.Requests())-fetched)
	}

	c.advance(2 * time.Hour)
	rotated, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr))
	if err != nil {
		t.Fatal(err)
	}
	if rotated.ID() == first.ID() {
		t.Fatal("the rotated root gives the same ID")
	}
	// The new root verifies what the new deployment signs, not what the old one did.
	reg := testenv.NewRegistry(t)
	byNew, byOld := reg.Push(t, "app", "2.0.0"), reg.Push(t, "app", "1.0.0")
	signing.Keyless(t, signing.In(reg, "app", byNew), next.Identity(ciSubject, ciIssuer))
	signing.Keyless(t, signing.In(reg, "app", byOld), sigstore.Identity(ciSubject, ciIssuer))
	repoRef, _ := name.NewRepository(reg.Image("app"), name.Insecure)
	if ok, reason, err := rotated.Verify(context.Background(), repoRef, byNew); !ok || err != nil {
		t.Errorf("Verify(signed under the new root) = %v, %q, %v", ok, reason, err)
	}
	if ok, _, err := rotated.Verify(context.Background(), repoRef, byOld); ok || err != nil {
		t.Errorf("Verify(signed under the old root) = %v, %v; want a refusal", ok, err)
	}
}

// TestIntegrationVerifyPublicGoodUnavailable makes the trusted root unobtainable in each way a
// repository can fail: New gives a *TUFError that names the repository, never a verifier, so
// that there is no verdict; and it waits before it asks again.
func TestIntegrationVerifyPublicGoodUnavailable(t *testing.T) {
	sigstore := signing.NewSigstore(t)
	closed := httptest.NewServer(nil)
	closed.Close()
	tests := []struct {
		name    string
		breakIt func(t *testing.T, repo *signing.TUFRepository)
		url     string
		mention string
	}{
		{"the repository answers 503", func(t *testing.T, repo *signing.TUFRepository) { repo.SetDown(true) }, "", "503"},
		{"nothing listens", nil, closed.URL, "connection refused"},
		{"the timestamp is signed with another key", func(t *testing.T, repo *signing.TUFRepository) { repo.SignTimestampWithOtherKey(t) },
			"", "timestamp"},
		{"the trusted root is not the one its metadata names", func(t *testing.T, repo *signing.TUFRepository) {
			repo.TamperTarget(t, "trusted_root.json", signing.NewSigstore(t).TrustedRootWithoutCTJSON(t))
		}, "", "trusted_root.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": sigstore.TrustedRootWithoutCTJSON(t)})
			if tt.breakIt != nil {
				tt.breakIt(t, repo)
			}
			tr := tufFromEnv(t, repo, t.TempDir())
			if tt.url != "" {
				t.Setenv(signature.EnvTUFURL, tt.url)
				var err error
				if tr, err = signature.TUFFromEnv(); err != nil {
					t.Fatal(err)
				}
			}
			c := &clock{now: time.Now()}
			signature.SetTUFClock(tr, c.Now)
			v, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr))
			var terr *signature.TUFError
			if v != nil || !errors.As(err, &terr) || !terr.Transient() {
				t.Fatalf("New() = %v, %v; want a *TUFError", v, err)
			}
			if errors.Is(err, signature.ErrKeys) || errors.Is(err, signature.ErrUnsupported) {
				t.Errorf("New() error %v reads as a problem of the spec", err)
			}
			if !strings.Contains(err.Error(), tr.URL()) || !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("New() error %q does not name %s and %q", err, tr.URL(), tt.mention)
			}
			t.Logf("New() error: %v", err)

			// Asked again at once, it does not ask the repository again.
			asked := len(repo.Requests())
			if _, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr)); err == nil {
				t.Fatal("New() succeeded right after a failure")
			}
			if n := len(repo.Requests()) - asked; n != 0 {
				t.Errorf("%d TUF requests right after a failure, want none", n)
			}
		})
	}

	// A repository back up is asked again after a while.
	repo := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": sigstore.TrustedRootWithoutCTJSON(t)})
	repo.SetDown(true)
	tr := tufFromEnv(t, repo, t.TempDir())
	c := &clock{now: time.Now()}
	signature.SetTUFClock(tr, c.Now)
	if _, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr)); err == nil {
		t.Fatal("New() succeeded with the repository down")
	}
	repo.SetDown(false)
	c.advance(time.Minute)
	if _, err := signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr)); err != nil {
		t.Fatalf("New() with the repository back: %v", err)
	}
}

// TestNewPublicGoodRefuses checks what is refused before any request: a spec without an
// identity, and a process without a TUFRoot.
func TestNewPublicGoodRefuses(t *testing.T) {
	repo := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": signing.NewSigstore(t).TrustedRootWithoutCTJSON(t)})
	tr := tufFromEnv(t, repo, t.TempDir())
	if _, err := signature.New(publicGoodSpec(), nil, signature.WithTUFRoot(tr)); err == nil || !strings.Contains(err.Error(), "at least one matchOIDCIdentity") {
		t.Errorf("New() without an identity: %v", err)
	}
	if _, err := signature.New(publicGoodSpec(v1.OIDCIdentityMatch{Issuer: "(", Subject: ".*"}), nil, signature.WithTUFRoot(tr)); err == nil || !strings.Contains(err.Error(), "matchOIDCIdentity[0]") {
		t.Errorf("New() with an identity that does not compile: %v", err)
	}
	if n := len(repo.Requests()); n != 0 {
		t.Errorf("%d TUF requests for specs that cannot work, want none", n)
	}
	if _, err := signature.New(publicGoodSpec(ciIdentity), nil); !errors.Is(err, signature.ErrUnsupported) {
		t.Errorf("New() without a TUFRoot: %v; want ErrUnsupported", err)
	}
}

// TestTUFFromEnvRefuses gives the policy function's environment settings that cannot work: the
// errors say which, and never quote a credential.
func TestTUFFromEnvRefuses(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, 600_000), 0o600); err != nil {
		t.Fatal(err)
	}
	notRoot := filepath.Join(dir, "not-root.json")
	if err := os.WriteFile(notRoot, []byte(`{"signed": {"_type": "targets"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		url, root, mention string
	}{
		{"https://user:s3cr3t-pass@mirror.example.com", "", "must not carry credentials"},
		{"https://mirror.example.com/?token=s3cr3t-pass", "", "no query"},
		{"ftp://mirror.example.com", "", "http or https"},
		{"mirror.example.com", "", "http or https"},
		{"", filepath.Join(dir, "absent.json"), signature.EnvTUFRoot},
		{"", big, "larger than"},
		{"", notRoot, "not TUF root metadata"},
	} {
		t.Setenv(signature.EnvTUFURL, tt.url)
		t.Setenv(signature.EnvTUFRoot, tt.root)
		t.Setenv(signature.EnvTUFCache, "")
		_, err := signature.TUFFromEnv()
		if err == nil || !strings.Contains(err.Error(), tt.mention) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("TUFFromEnv() with %q, %q: %v; want an error mentioning %q", tt.url, tt.root, err, tt.mention)
		}
	}
	// Unset, it is the public-good repository; nothing is fetched yet.
	t.Setenv(signature.EnvTUFURL, "")
	t.Setenv(signature.EnvTUFRoot, "")
	r, err := signature.TUFFromEnv()
	if err != nil || r.URL() != signature.DefaultTUFURL {
		t.Fatalf("TUFFromEnv() = %v, %v; want the public-good repository", r, err)
	}
}

// TestIntegrationVerifyPublicGoodBoundsReads serves an endless body for every file: the client
// stops reading at TUF's bound for the file, and New fails without a verifier.
func TestIntegrationVerifyPublicGoodBoundsReads(t *testing.T) {
	var mu sync.Mutex
	written := 0
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		for {
			n, err := w.Write(chunk)
			mu.Lock()
			written += n
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}))
	defer endless.Close()
	repo := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": signing.NewSigstore(t).TrustedRootWithoutCTJSON(t)})
	tufFromEnv(t, repo, t.TempDir())
	t.Setenv(signature.EnvTUFURL, endless.URL)
	tr, err := signature.TUFFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	_, err = signature.New(publicGoodSpec(ciIdentity), nil, signature.WithTUFRoot(tr))
	var terr *signature.TUFError
	if !errors.As(err, &terr) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("New() error = %v; want a *TUFError about the length", err)
	}
	endless.CloseClientConnections()
	mu.Lock()
	defer mu.Unlock()
	// The server writes ahead of what the client reads by the sockets' buffers.
	if written > 16<<20 {
		t.Errorf("the server wrote %d bytes before the client stopped reading", written)
	}
	t.Logf("the server wrote %d bytes; New() error: %v", written, err)
}
