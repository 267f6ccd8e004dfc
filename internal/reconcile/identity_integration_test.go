package reconcile_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// identityFixture is an evalFixture whose tags come from real scans of real registries: a
// Scanner writes through the fixture's read-write Store, as the scan function does, and the
// Evaluator reads them through the read-only one.
type identityFixture struct {
	*evalFixture
	scanner *reconcile.Scanner
}

func newIdentityFixture(t *testing.T) *identityFixture {
	t.Helper()
	f := newEvalFixture(t)
	return &identityFixture{evalFixture: f, scanner: &reconcile.Scanner{
		Kube: f.Kube, Registry: registry.New(registry.WithRateLimit(0, 0)), Store: f.Writer,
	}}
}

// createRepo creates the ImageRepository app of image, on a plain-HTTP registry.
func (f *identityFixture) createRepo(t *testing.T, image string) *v1.ImageRepository {
	t.Helper()
	return f.Repo(t, f.NS, "app", image, func(r *v1.ImageRepository) { r.Spec.Insecure = true })
}

// editRepo changes the spec of the ImageRepository app, which raises its generation.
func (f *identityFixture) editRepo(t *testing.T, change func(*v1.ImageRepositorySpec)) {
	t.Helper()
	r, err := f.Kube.Repositories.Get(context.Background(), f.NS, "app")
	if err != nil {
		t.Fatal(err)
	}
	change(&r.Spec)
	if _, err := f.Kube.Repositories.Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func (f *identityFixture) scan(t *testing.T, hint *reconcile.Hint) reconcile.ScanOutcome {
	t.Helper()
	out, err := f.scanner.Scan(context.Background(), reconcile.ScanRequest{Namespace: f.NS, Name: "app", Hint: hint})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

// resolve creates the ImagePolicy app (semver *) and evaluates it to want, a first time.
func (f *identityFixture) resolve(t *testing.T, want *v1.ImageRef) {
	t.Helper()
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*")})
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || !evaltest.SameRef(out.Latest, want) {
		t.Fatalf("first evaluation: %+v, want %s", out, want)
	}
}

// checkWaits evaluates the policy app, once by itself and once as the repository's TagsChanged
// event would, and checks that both wait for a scan and leave latestRef at kept: tags listed
// for something else than the repository as it is now are never used.
func (f *identityFixture) checkWaits(t *testing.T, kept *v1.ImageRef) {
	t.Helper()
	announced := len(f.Sink.About(f.NS, "app"))
	out := f.Evaluate(t, f.NS, "app")
	if out.Result != reconcile.PolicyFailed || out.Reason != v1.DependencyNotReadyReason || !evaltest.SameRef(out.Latest, kept) {
		t.Errorf("evaluation: %+v, want %s with latestRef %s kept", out, v1.DependencyNotReadyReason, kept)
	}
	outs, err := f.Ev.EvaluateRepository(context.Background(), f.NS, "app")
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Result != reconcile.PolicyFailed || !evaltest.SameRef(outs[0].Latest, kept) {
		t.Errorf("evaluation of the repository's policies: %+v", outs)
	}
	p := f.Get(t, f.NS, "app")
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.DependencyNotReadyReason, Msg: "waiting for a scan of its current spec", Stalled: false})
	if !evaltest.SameRef(p.Status.LatestRef, kept) {
		t.Errorf("latestRef %s, want %s kept", evaltest.RefString(p.Status.LatestRef), kept)
	}
	if got := f.Sink.About(f.NS, "app"); len(got) != announced {
		t.Errorf("LatestChanged announced %+v while waiting", got[announced:])
	}
}

// TestIdentityIntegrationRecreatedRepository: an ImageRepository deleted and created again
// with another image, before its first scan, finds the tags of its predecessor in the store
// under the same key. Its policy keeps the latestRef it has and waits; it never writes the new
// image with a tag of the old one. The first scan of the new object replaces the entry.
func TestIdentityIntegrationRecreatedRepository(t *testing.T) {
	f := newIdentityFixture(t)
	ctx := context.Background()
	reg := testenv.NewRegistry(t)
	reg.Push(t, "old", "1.0.0", "2.0.0")
	reg.Push(t, "new", "0.1.0")
	f.createRepo(t, reg.Image("old"))
	f.scan(t, nil)
	old := &v1.ImageRef{Name: reg.Image("old"), Tag: "2.0.0"}
	f.resolve(t, old)

	if err := f.Kube.Repositories.Delete(ctx, f.NS, "app"); err != nil {
		t.Fatal(err)
	}
	f.createRepo(t, reg.Image("new"))
	f.checkWaits(t, old)

	// A push to the new image does not extend the old list either: the scan lists in full.
	out := f.scan(t, &reconcile.Hint{Tags: []string{"0.1.0"}})
	if out.Incremental || !out.Changed || out.TagCount != 1 || out.Failure != "" {
		t.Fatalf("first scan of the new object: %+v", out)
	}
	want := &v1.ImageRef{Name: reg.Image("new"), Tag: "0.1.0"}
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || !evaltest.SameRef(out.Latest, want) {
		t.Errorf("after the scan: %+v, want %s", out, want)
	}
}

// TestIdentityIntegrationImageEditedScanFails: spec.image is edited to a registry that wants
// credentials the repository does not have yet, so the next scan fails and the store keeps the
// old image's tags. The policy keeps its latestRef and waits; once credentials are given, the
// scan succeeds and the policy resolves against the new image.
func TestIdentityIntegrationImageEditedScanFails(t *testing.T) {
	f := newIdentityFixture(t)
	ctx := context.Background()
	open := testenv.NewRegistry(t)
	open.Push(t, "app", "1.0.0", "2.0.0")
	locked := testenv.NewRegistry(t, testenv.RegistryBasicAuth("robot", "s3cret"))
	locked.Push(t, "app", "0.5.0")
	f.createRepo(t, open.Image("app"))
	f.scan(t, nil)
	old := &v1.ImageRef{Name: open.Image("app"), Tag: "2.0.0"}
	f.resolve(t, old)

	f.editRepo(t, func(s *v1.ImageRepositorySpec) { s.Image = locked.Image("app") })
	if out := f.scan(t, nil); out.Failure != v1.AuthenticationFailedReason {
		t.Fatalf("scan of the locked registry: %+v", out)
	}
	f.checkWaits(t, old)
	// A push announced for the new image changes nothing while the registry refuses the scan.
	if out := f.scan(t, &reconcile.Hint{Tags: []string{"2.0.0"}}); out.Failure != v1.AuthenticationFailedReason {
		t.Fatalf("push scan of the locked registry: %+v", out)
	}
	f.checkWaits(t, old)

	auth := base64.StdEncoding.EncodeToString([]byte("robot:s3cret"))
	_, err := f.Kube.Secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.NS, Name: "locked"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{
			corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, locked.Host(), auth),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.editRepo(t, func(s *v1.ImageRepositorySpec) { s.SecretRef = &v1.LocalObjectReference{Name: "locked"} })
	if out := f.scan(t, nil); out.Failure != "" || !out.Changed || out.TagCount != 1 {
		t.Fatalf("scan with credentials: %+v", out)
	}
	want := &v1.ImageRef{Name: locked.Image("app"), Tag: "0.5.0"}
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || !evaltest.SameRef(out.Latest, want) {
		t.Errorf("after the scan with credentials: %+v, want %s", out, want)
	}
}

// TestIdentityIntegrationExclusionListEdited: a list kept under one exclusion list is not used
// under another until a scan applies it, even by an evaluator that remembers resolving the
// policy from that very list; an edit that keeps the same tags still counts as new once
// scanned, so the waiting policy is evaluated again.
func TestIdentityIntegrationExclusionListEdited(t *testing.T) {
	f := newIdentityFixture(t)
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "1.0.0", "2.0.0")
	f.createRepo(t, reg.Image("app"))
	f.scan(t, nil)
	latest := &v1.ImageRef{Name: reg.Image("app"), Tag: "2.0.0"}
	f.resolve(t, latest)
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicyUnchanged {
		t.Fatalf("second evaluation from the same inputs: %+v", out)
	}

	f.editRepo(t, func(s *v1.ImageRepositorySpec) { s.ExclusionList = []string{`^2\.`} })
	f.checkWaits(t, latest)
	out := f.scan(t, nil)
	if !out.Changed || out.TagCount != 1 {
		t.Fatalf("scan under the new exclusion list: %+v", out)
	}
	want := &v1.ImageRef{Name: reg.Image("app"), Tag: "1.0.0"}
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || !evaltest.SameRef(out.Latest, want) {
		t.Fatalf("after the scan: %+v, want %s", out, want)
	}

	// An exclusion that removes nothing more: the same tags, the same revision.
	f.editRepo(t, func(s *v1.ImageRepositorySpec) { s.ExclusionList = []string{`^2\.`, `^nightly-`} })
	f.checkWaits(t, want)
	out = f.scan(t, nil)
	if !out.Changed || out.Revision != store.RevisionOf([]string{"1.0.0"}) {
		t.Fatalf("scan that kept the same tags: %+v, want changed", out)
	}
	if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || !evaltest.SameRef(out.Latest, want) {
		t.Errorf("after the second scan: %+v, want %s", out, want)
	}
}

// TestIdentityIntegrationPushNeedsListOfSameIdentity: a push for a repository whose status
// shows a successful scan of its current spec is still not added to a stored list of another
// identity (one left by an earlier object of that name, or written before identities were
// recorded): the scan lists in full instead.
func TestIdentityIntegrationPushNeedsListOfSameIdentity(t *testing.T) {
	f := newIdentityFixture(t)
	ctx := context.Background()
	reg := testenv.NewRegistry(t)
	reg.Push(t, "app", "1.0.0")
	repo := f.createRepo(t, reg.Image("app"))
	f.scan(t, nil)

	key := reconcile.StoreKey(f.NS, "app")
	foreign := evaltest.Identity(t, repo)
	foreign.UID = "an-earlier-object"
	if _, _, err := f.Writer.Put(ctx, key, foreign, []string{"9.9.9"}, repo.CreationTimestamp.Time); err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "app", "1.1.0")
	out := f.scan(t, &reconcile.Hint{Tags: []string{"1.1.0"}})
	if out.Incremental || !out.Changed || out.TagCount != 2 {
		t.Fatalf("push onto a list of another identity: %+v, want a full listing", out)
	}
	e, err := f.Writer.Get(ctx, key, evaltest.Identity(t, repo))
	if err != nil || fmt.Sprint(e.Tags) != "[1.0.0 1.1.0]" {
		t.Errorf("stored %v, %v", e.Tags, err)
	}

	// With a list of its own identity the next push is incremental again.
	reg.Push(t, "app", "1.2.0")
	if out := f.scan(t, &reconcile.Hint{Tags: []string{"1.2.0"}}); !out.Incremental || out.TagCount != 3 {
		t.Errorf("push onto its own list: %+v, want incremental", out)
	}
}
