package verifytest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/signature"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/signing"
)

// verifyFixture is an evalFixture whose Evaluator verifies signatures with internal/signature,
// as the policy function's does, against an in-process registry, with a clock the test moves.
type verifyFixture struct {
	*evalFixture
	reg     *testenv.Registry
	trusted *signing.CosignKey
	other   *signing.CosignKey

	mu  sync.Mutex
	now time.Time
}

func newVerifyFixture(t *testing.T, opts ...testenv.RegistryOption) *verifyFixture {
	t.Helper()
	f := &verifyFixture{evalFixture: newEvalFixture(t), reg: testenv.NewRegistry(t, opts...),
		trusted: signing.NewCosignKey(t), other: signing.NewCosignKey(t), now: time.Now()}
	f.Ev.Verifier = func(spec *v1.OCIRepositoryVerification, data map[string][]byte) (reconcile.ImageVerifier, error) {
		return signature.New(spec, data)
	}
	f.Ev.Now = func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.now
	}
	f.secret(t, "cosign-keys", map[string][]byte{"cosign.pub": f.trusted.PublicPEM})
	return f
}

func (f *verifyFixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *verifyFixture) secret(t *testing.T, name string, data map[string][]byte) {
	t.Helper()
	_, err := f.Kube.Secrets.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.NS, Name: name}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
}

// verifiedPolicy creates the repository name of the registry's image name and a semver policy
// of the same name over it that verifies with the Secret secret.
func (f *verifyFixture) verifiedPolicy(t *testing.T, name, secret string) {
	t.Helper()
	f.Repo(t, f.NS, name, f.reg.Image(name), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
	f.Policy(t, f.NS, name, v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo(name), Policy: evaltest.Semver("*"),
		Verify: &v1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &v1.LocalObjectReference{Name: secret}}})
}

// request annotates a policy with a new reconcile request, so that it is evaluated again.
func (f *verifyFixture) request(t *testing.T, name, token string) {
	t.Helper()
	p := f.Get(t, f.NS, name)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[v1.ReconcileRequestAnnotation] = token
	if _, err := f.Kube.Policies.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationVerifiedSelection signs some of a repository's tags in the formats cosign writes,
// others wrongly, and checks that the best validly signed tag becomes latest, that the better
// ones are reported with why they were skipped, that evaluating again costs no registry request,
// and that latestRef never moves to an unverified tag or back.
func TestIntegrationVerifiedSelection(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []testenv.RegistryOption
	}{{"referrers API", []testenv.RegistryOption{testenv.RegistryReferrers()}}, {"referrers tag schema", nil}} {
		t.Run(mode.name, func(t *testing.T) {
			f := newVerifyFixture(t, mode.opts...)
			reg := f.reg
			d100 := reg.Push(t, "app", "1.0.0")
			signing.Legacy(t, signing.In(reg, "app", d100), f.trusted)
			d110 := reg.Push(t, "app", "1.1.0")
			signing.Bundle(t, signing.In(reg, "app", d110), f.trusted)
			reg.Push(t, "app", "1.2.0")
			d130 := reg.Push(t, "app", "1.3.0")
			signing.Legacy(t, signing.In(reg, "app", d130), f.other)
			d140 := reg.Push(t, "app", "1.4.0")
			signing.Legacy(t, signing.In(reg, "app", d140), f.trusted, signing.Over(d100))
			d150 := reg.Push(t, "app", "1.5.0")
			signing.Bundle(t, signing.In(reg, "app", d150), f.trusted, signing.Tampered())
			f.verifiedPolicy(t, "app", "cosign-keys")
			tags := []string{"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0",
				strings.Replace(d100, ":", "-", 1) + ".sig", strings.Replace(d110, ":", "-", 1)}
			f.Put(t, f.NS, "app", tags...)

			p := f.evaluateSkips(t, f.NS, "app", "1.1.0")
			ready := readyMessage(p)
			for _, want := range []string{"1.5.0 (", "no signature bundle verifies", "1.4.0 (the signature is over another digest",
				"1.3.0 (signed, but no signature verifies with the trusted keys", "1.2.0 (not signed)"} {
				if !strings.Contains(ready, want) {
					t.Errorf("Ready message %q does not say %q", ready, want)
				}
			}
			f.WaitEvent(t, "app", corev1.EventTypeWarning, v1.VerificationErrorReason, "1.2.0 (not signed)")

			// Evaluating the unchanged repository again costs no registry request.
			before := reg.RequestCount()
			f.request(t, "app", "again")
			if out := f.Evaluate(t, f.NS, "app"); out.Result != reconcile.PolicySucceeded || out.Latest.Tag != "1.1.0" {
				t.Fatalf("second outcome %+v", out)
			}
			if n := reg.RequestCount() - before; n != 0 {
				t.Errorf("evaluating an unchanged repository again made %d registry requests, want 0", n)
			}

			// An unsigned newer tag does not move latestRef, neither up nor back.
			reg.Push(t, "app", "2.0.0")
			f.Put(t, f.NS, "app", append(tags, "2.0.0")...)
			if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.1.0" || out.Changed {
				t.Fatalf("after an unsigned 2.0.0: %+v, want 1.1.0 kept", out)
			}
			// Signed a moment later, it is taken once the refusal is no longer remembered.
			signing.Legacy(t, signing.In(reg, "app", reg.ImageDigest(t, "app", "2.0.0")), f.trusted)
			f.advance(reconcile.UnverifiedTTL)
			f.request(t, "app", "signed")
			if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "2.0.0" || !out.Changed {
				t.Fatalf("after signing 2.0.0: %+v, want 2.0.0", out)
			}
			evaltest.CheckReady(t, f.Get(t, f.NS, "app"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "updated from 1.1.0 to 2.0.0", Stalled: false})
		})
	}
}

func TestIntegrationVerifiedSelectionNoneVerifies(t *testing.T) {
	f := newVerifyFixture(t)
	f.reg.Push(t, "app", "1.0.0")
	signing.Legacy(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.1.0")), f.other)
	f.verifiedPolicy(t, "app", "cosign-keys")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	kept := &v1.ImageRef{Name: f.reg.Image("app"), Tag: "0.9.0"}
	f.Seed(t, f.NS, "app", kept)

	p := f.evaluateKeeps(t, f.NS, "app", kept)
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.VerificationErrorReason, Msg: "no signature verifies for any of the 2 best tags, so latestRef is kept: 1.1.0 (signed, but no signature verifies with the trusted keys), 1.0.0 (not signed)", Stalled: false})
	f.WaitEvent(t, "app", corev1.EventTypeWarning, v1.VerificationErrorReason, "no signature verifies")
}

// TestIntegrationVerifiedSelectionAtMostTenChecked pushes more unsigned tags than one evaluation
// checks above a signed one: latestRef stays where it was.
func TestIntegrationVerifiedSelectionAtMostTenChecked(t *testing.T) {
	f := newVerifyFixture(t)
	signing.Legacy(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.0.0")), f.trusted)
	tags := []string{"1.0.0"}
	for i := 1; i <= reconcile.MaxVerifiedCandidates; i++ {
		tag := fmt.Sprintf("1.0.%d", i)
		f.reg.Push(t, "app", tag)
		tags = append(tags, tag)
	}
	f.verifiedPolicy(t, "app", "cosign-keys")
	f.Put(t, f.NS, "app", tags...)
	heads := func() int {
		n := 0
		for _, r := range f.reg.Requests() {
			if r.Method == "HEAD" && strings.Contains(r.URI, "/manifests/1.") {
				n++
			}
		}
		return n
	}
	out := f.Evaluate(t, f.NS, "app")
	if out.Result != reconcile.PolicyFailed || out.Reason != v1.VerificationErrorReason {
		t.Fatalf("outcome %+v, want VerificationError", out)
	}
	if n := heads(); n != reconcile.MaxVerifiedCandidates {
		t.Errorf("%d tags resolved, want %d", n, reconcile.MaxVerifiedCandidates)
	}
}

func TestIntegrationVerifiedSelectionBadKeys(t *testing.T) {
	f := newVerifyFixture(t)
	f.secret(t, "bad-keys", map[string][]byte{"cosign.pub": []byte("-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END EC PRIVATE KEY-----\n")})
	f.reg.Push(t, "app", "1.0.0")
	f.verifiedPolicy(t, "app", "bad-keys")
	f.Put(t, f.NS, "app", "1.0.0")
	before := f.reg.RequestCount()
	out := f.Evaluate(t, f.NS, "app")
	if out.Result != reconcile.PolicyStalled {
		t.Fatalf("outcome %+v, want Stalled", out)
	}
	p := f.Get(t, f.NS, "app")
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.VerificationErrorReason, Msg: `Secret ` + f.NS + `/bad-keys: invalid key material: "cosign.pub": a PEM block of type "EC PRIVATE KEY", not PUBLIC KEY`, Stalled: true})
	if strings.Contains(readyMessage(p), "c2VjcmV0") {
		t.Errorf("the Ready message quotes the key material: %q", readyMessage(p))
	}
	if n := f.reg.RequestCount() - before; n != 0 {
		t.Errorf("%d registry requests with unusable keys, want 0", n)
	}

	// A missing Secret may yet be created: not Stalled.
	f.Repo(t, f.NS, "other", f.reg.Image("app"), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
	f.Policy(t, f.NS, "other", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("other"), Policy: evaltest.Semver("*"),
		Verify: &v1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &v1.LocalObjectReference{Name: "absent"}}})
	f.Put(t, f.NS, "other", "1.0.0")
	f.Evaluate(t, f.NS, "other")
	evaltest.CheckReady(t, f.Get(t, f.NS, "other"), evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.VerificationErrorReason, Msg: "Secret " + f.NS + "/absent not found", Stalled: false})
}

func readyMessage(p *v1.ImagePolicy) string {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.ReadyCondition {
			return c.Message
		}
	}
	return ""
}

// addPushed adds tag to the stored list of ns/name as the scan's incremental path does after a
// push, and returns the signed TagsChanged event with the tag's real digest.
func (f *verifyFixture) addPushed(t *testing.T, name, tag, digest string) events.TagsChanged {
	t.Helper()
	id := f.IDs[reconcile.StoreKey(f.NS, name)]
	a, err := f.Writer.Push(context.Background(), reconcile.StoreKey(f.NS, name), id, []string{tag}, "")
	if err != nil {
		t.Fatal(err)
	}
	c := events.TagsChanged{Namespace: f.NS, Name: name, Revision: a.Revision, Delta: &events.TagsDelta{
		UID: id.UID, Image: id.Image, Listing: id.Listing, From: a.From,
		Added: []events.AddedTag{{Tag: tag, Digest: digest}}}}
	key, err := f.Writer.ProofKey(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Sign(key); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIntegrationVerifiedPushChecksOnlyThePushedTag evaluates a policy with verify after a push
// whose event carries the delta: only the pushed image's signatures are read from the registry.
func TestIntegrationVerifiedPushChecksOnlyThePushedTag(t *testing.T) {
	f := newVerifyFixture(t)
	d100 := f.reg.Push(t, "app", "1.0.0")
	signing.Legacy(t, signing.In(f.reg, "app", d100), f.trusted)
	d110 := f.reg.Push(t, "app", "1.1.0")
	f.verifiedPolicy(t, "app", "cosign-keys")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.0.0" {
		t.Fatalf("outcome %+v, want 1.0.0", out)
	}

	d200 := f.reg.Push(t, "app", "2.0.0")
	signing.Bundle(t, signing.In(f.reg, "app", d200), f.trusted)
	change := f.addPushed(t, "app", "2.0.0", d200)
	f.Cached(t, f.NS+"/app")
	before := len(f.reg.Requests())
	outs, err := f.Ev.EvaluateChange(context.Background(), change)
	if err != nil || len(outs) != 1 || outs[0].Latest == nil || outs[0].Latest.Tag != "2.0.0" {
		t.Fatalf("EvaluateChange() = %+v, %v; want 2.0.0", outs, err)
	}
	made := f.reg.Requests()[before:]
	t.Logf("registry requests for the push of a signed tag: %d", len(made))
	for _, r := range made {
		t.Logf("  %s %s %d", r.Method, r.URI, r.Status)
		if r.Method == "HEAD" && strings.Contains(r.URI, "/manifests/") && !strings.Contains(r.URI, "sha256") {
			t.Errorf("resolved a tag the delta and the memory knew: %s %s", r.Method, r.URI)
		}
		for _, old := range []string{d100, d110} {
			if hex := strings.TrimPrefix(old, "sha256:"); strings.Contains(r.URI, hex) {
				t.Errorf("read the signatures of an image checked before: %s %s", r.Method, r.URI)
			}
		}
	}
}

// newUnsignedPushFixture returns a verifyFixture, on a registry of opts, whose policy "app"
// selected 1.0.0, signed, skipping 1.1.0, pushed unsigned, and the digest of 1.1.0.
func newUnsignedPushFixture(t *testing.T, opts ...testenv.RegistryOption) (*verifyFixture, string) {
	t.Helper()
	f := newVerifyFixture(t, opts...)
	signing.Legacy(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.0.0")), f.trusted)
	d110 := f.reg.Push(t, "app", "1.1.0")
	f.verifiedPolicy(t, "app", "cosign-keys")
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.0.0" {
		t.Fatalf("outcome %+v, want 1.0.0 while 1.1.0 is unsigned", out)
	}
	return f, d110
}

// TestIntegrationVerifiedAdvanceIsAFullEvaluation announces pushes to a policy with verify with
// their deltas, through an Evaluator whose tag store holds no tags: a signed push is verified
// and advanced, an unsigned one is skipped and reported while latestRef stays, each as the full
// evaluation from the store that follows finds it; once a tag was skipped, the next push is no
// longer advanced (the skipped tag may have been signed since) and the store decides.
func TestIntegrationVerifiedAdvanceIsAFullEvaluation(t *testing.T) {
	f := newVerifyFixture(t)
	signing.Legacy(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.0.0")), f.trusted)
	f.verifiedPolicy(t, "app", "cosign-keys")
	f.Put(t, f.NS, "app", "1.0.0")
	if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.0.0" {
		t.Fatalf("outcome %+v, want 1.0.0", out)
	}
	withoutStore := f.withoutStore(t)
	full := func(token string) *v1.ImagePolicy {
		t.Helper()
		f.request(t, "app", token)
		f.Evaluate(t, f.NS, "app")
		return f.Get(t, f.NS, "app")
	}
	for _, step := range []struct {
		tag, want, reported string
		sign                bool
	}{
		{tag: "2.0.0", sign: true, want: "2.0.0"},
		{tag: "3.0.0", want: "2.0.0", reported: "3.0.0 (not signed)"},
	} {
		digest := f.reg.Push(t, "app", step.tag)
		if step.sign {
			signing.Bundle(t, signing.In(f.reg, "app", digest), f.trusted)
		}
		change := f.addPushed(t, "app", step.tag, digest)
		f.Cached(t, f.NS+"/app")
		outs, err := withoutStore(change)
		if err != nil || len(outs) != 1 || outs[0].Latest == nil || outs[0].Latest.Tag != step.want {
			t.Fatalf("push of %s through a store without tags: %+v, %v; want %s", step.tag, outs, err, step.want)
		}
		advanced := f.Get(t, f.NS, "app")
		if !strings.Contains(readyMessage(advanced), step.reported) || step.reported == "" && strings.Contains(readyMessage(advanced), "skipped") {
			t.Errorf("push of %s: Ready message %q, want it to report %q", step.tag, readyMessage(advanced), step.reported)
		}
		evaluated := full("full-" + step.tag)
		if *evaluated.Status.LatestRef != *advanced.Status.LatestRef || readyMessage(evaluated) != readyMessage(advanced) {
			t.Errorf("push of %s: advanced to %+v (%q), a full evaluation finds %+v (%q)", step.tag,
				advanced.Status.LatestRef, readyMessage(advanced), evaluated.Status.LatestRef, readyMessage(evaluated))
		}
	}

	d400 := f.reg.Push(t, "app", "4.0.0")
	signing.Bundle(t, signing.In(f.reg, "app", d400), f.trusted)
	change := f.addPushed(t, "app", "4.0.0", d400)
	f.Cached(t, f.NS+"/app")
	if outs, _ := withoutStore(change); len(outs) == 1 && outs[0].Latest != nil && outs[0].Latest.Tag == "4.0.0" {
		t.Fatalf("a policy that skipped 3.0.0 was advanced by the delta: %+v", outs)
	}
	if p := full("full-4.0.0"); p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "4.0.0" {
		t.Errorf("through the store: latestRef %+v, want 4.0.0", p.Status.LatestRef)
	}
}

// TestIntegrationVerifiedSelectionSignedBehindTheReferrersAPI signs a refused image through the
// referrers API, which pushes no tag and so no notification: the policy, which names the skipped
// tag, is evaluated again as it is (the cron reconciler's DueUnverified asks for that), keeps the
// remembered refusal while it is fresh, and selects the tag once the refusal has expired.
func TestIntegrationVerifiedSelectionSignedBehindTheReferrersAPI(t *testing.T) {
	f, d110 := newUnsignedPushFixture(t, testenv.RegistryReferrers())
	signing.Bundle(t, signing.In(f.reg, "app", d110), f.trusted)
	before := f.reg.RequestCount()
	if out := f.Evaluate(t, f.NS, "app"); out.Result == reconcile.PolicyUnchanged || out.Latest == nil || out.Latest.Tag != "1.0.0" {
		t.Fatalf("outcome %+v, want an evaluation that keeps 1.0.0 while the refusal is fresh", out)
	}
	if n := f.reg.RequestCount() - before; n != 0 {
		t.Errorf("an evaluation within the refusal's lifetime made %d registry requests, want 0", n)
	}
	f.advance(reconcile.UnverifiedTTL)
	if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.1.0" {
		t.Fatalf("outcome %+v, want 1.1.0 once the refusal expired", out)
	}
}

// withoutStore returns a function that evaluates a TagsChanged event with f's Evaluator, its
// memory of verdicts included, reading a tag store that holds no tags, only the key of f's
// directory: an evaluation that succeeds through it did not read the tags.
func (f *verifyFixture) withoutStore(t *testing.T) func(events.TagsChanged) ([]reconcile.PolicyOutcome, error) {
	t.Helper()
	empty := f.Storeless(t).Store
	return func(c events.TagsChanged) ([]reconcile.PolicyOutcome, error) {
		saved := f.Ev.Store
		f.Ev.Store = empty
		defer func() { f.Ev.Store = saved }()
		return f.Ev.EvaluateChange(context.Background(), c)
	}
}

// TestIntegrationVerifiedSelectionSignedAfterPush signs an image after its push was evaluated,
// on a registry without the referrers API: the referrers tag schema's new tag, once listed, has
// the signature looked at again at once, without waiting for the refusal to be forgotten.
func TestIntegrationVerifiedSelectionSignedAfterPush(t *testing.T) {
	f, d110 := newUnsignedPushFixture(t)
	signing.Bundle(t, signing.In(f.reg, "app", d110), f.trusted)
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0", strings.Replace(d110, ":", "-", 1))
	if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.1.0" {
		t.Fatalf("outcome %+v, want 1.1.0 once its signature is listed", out)
	}
}

// TestIntegrationVerifiedSelectionSignatureAnnounced signs refused images in the two ways that
// change no stored tag list: cosign's legacy .sig tag, which Flux's default exclusion list
// drops, and a second signature that rewrites the referrers tag schema's tag already stored.
// An evaluation without news keeps the refusal it remembers, at no registry request; the
// TagsChanged event of the scan that saw the signature's push names the image (Attached), and
// the evaluation it makes verifies that image again at once.
func TestIntegrationVerifiedSelectionSignatureAnnounced(t *testing.T) {
	ctx := context.Background()
	f, d110 := newUnsignedPushFixture(t)
	announced := func(digest, want string) {
		t.Helper()
		rev := f.revision(t, "app")
		outs, err := f.Ev.EvaluateChange(ctx, events.TagsChanged{Namespace: f.NS, Name: "app", Revision: rev,
			Attached: []string{digest}})
		if err != nil || len(outs) != 1 || outs[0].Latest == nil || outs[0].Latest.Tag != want {
			t.Fatalf("EvaluateChange(attached %s) = %+v, %v; want %s", digest, outs, err, want)
		}
	}

	signing.Legacy(t, signing.In(f.reg, "app", d110), f.trusted)
	before := f.reg.RequestCount()
	if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.0.0" {
		t.Fatalf("outcome %+v, want 1.0.0 while the refusal of 1.1.0 is remembered", out)
	}
	if n := f.reg.RequestCount() - before; n != 0 {
		t.Errorf("an evaluation of an unchanged repository made %d registry requests, want 0", n)
	}
	announced(d110, "1.1.0")

	d120 := f.reg.Push(t, "app", "1.2.0")
	signing.Bundle(t, signing.In(f.reg, "app", d120), f.other)
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0", "1.2.0", strings.Replace(d120, ":", "-", 1))
	if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.1.0" {
		t.Fatalf("outcome %+v, want 1.1.0 while 1.2.0 is signed by another key only", out)
	}
	signing.Bundle(t, signing.In(f.reg, "app", d120), f.trusted)
	announced(d120, "1.2.0")
	if p := f.Get(t, f.NS, "app"); strings.Contains(readyMessage(p), "skipped") {
		t.Errorf("Ready message %q still names a skipped tag", readyMessage(p))
	}
}

// revision returns the tag revision that policy name was last evaluated against.
func (f *verifyFixture) revision(t *testing.T, name string) string {
	t.Helper()
	rev := f.Get(t, f.NS, name).Status.ObservedTagsRevision
	if rev == "" {
		t.Fatalf("policy %s records no evaluated tag revision", name)
	}
	return rev
}

// TestIntegrationVerifiedDigestIsReflected checks that latestRef.digest, where the policy
// reflects digests, is the digest whose signature verified.
func TestIntegrationVerifiedDigestIsReflected(t *testing.T) {
	f := newVerifyFixture(t)
	d100 := f.reg.Push(t, "app", "1.0.0")
	signing.Bundle(t, signing.In(f.reg, "app", d100), f.trusted)
	f.reg.Push(t, "app", "1.1.0")
	f.Repo(t, f.NS, "app", f.reg.Image("app"), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	verify := &v1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &v1.LocalObjectReference{Name: "cosign-keys"}}
	for name, want := range map[v1.ReflectionPolicy]string{v1.ReflectNever: "", v1.ReflectIfNotPresent: d100, v1.ReflectAlways: d100} {
		spec := v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*"), Verify: verify, DigestReflectionPolicy: name}
		if name == v1.ReflectAlways {
			spec.Interval = &metav1.Duration{Duration: time.Hour}
		}
		pol := strings.ToLower(string(name))
		f.Policy(t, f.NS, pol, spec)
		out := f.Evaluate(t, f.NS, pol)
		if out.Latest == nil || out.Latest.Tag != "1.0.0" || out.Latest.Digest != want {
			t.Errorf("%s: latest %s, want 1.0.0 with digest %q", name, evaltest.RefString(out.Latest), want)
		}
	}
}

// TestIntegrationVerifiedSelectionKeyless selects by keyless signatures of a Sigstore made for
// the test, whose trusted root the Secret holds: an image signed by another identity is skipped.
func TestIntegrationVerifiedSelectionKeyless(t *testing.T) {
	f := newVerifyFixture(t)
	sigstore := signing.NewSigstore(t)
	f.secret(t, "sigstore", map[string][]byte{signature.TrustedRootKey: sigstore.TrustedRootJSON(t)})
	const issuer, subject = "https://token.actions.githubusercontent.com", "https://github.com/org/app/.github/workflows/release.yaml@refs/tags/v1"
	signing.Keyless(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.0.0")), sigstore.Identity(subject, issuer))
	signing.Keyless(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.1.0")), sigstore.Identity("https://github.com/fork/app/.github/workflows/release.yaml@refs/tags/v1", issuer))
	f.Repo(t, f.NS, "app", f.reg.Image("app"), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
	f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*"),
		Verify: &v1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &v1.LocalObjectReference{Name: "sigstore"},
			MatchOIDCIdentity: []v1.OIDCIdentityMatch{{Issuer: "^" + issuer + "$", Subject: "^https://github.com/org/app/"}}}})
	f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
	out := f.Evaluate(t, f.NS, "app")
	if out.Latest == nil || out.Latest.Tag != "1.0.0" {
		t.Fatalf("outcome %+v, want 1.0.0", out)
	}
	evaltest.CheckReady(t, f.Get(t, f.NS, "app"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: // The subject's "@" reads as a URL's userinfo, Stalled: which every condition message masks.
	"1.1.0 (signed by https://xxxxx@refs/tags/v1 (issuer " + issuer + ") that matchOIDCIdentity does not match)"})
}

// TestIntegrationVerifiedSelectionNotation selects by Notation signatures under the trust
// policy and trust store of a Secret, as `notation sign` makes and pushes them: an image signed
// by a certificate of another CA, and one signed over another image's digest, are skipped.
func TestIntegrationVerifiedSelectionNotation(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []testenv.RegistryOption
	}{{"referrers API", []testenv.RegistryOption{testenv.RegistryReferrers()}}, {"referrers tag schema", nil}} {
		t.Run(mode.name, func(t *testing.T) {
			f := newVerifyFixture(t, mode.opts...)
			trusted, other := signing.NewNotationCA(t), signing.NewNotationCA(t)
			f.secret(t, "notation", map[string][]byte{"ca.crt": trusted.CertPEM,
				signature.TrustPolicyKey: signing.NotationTrustPolicy(f.reg.Image("app"))})
			d100 := f.reg.Push(t, "app", "1.0.0")
			signing.Notation(t, signing.In(f.reg, "app", d100), trusted)
			signing.Notation(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.1.0")), other)
			signing.Notation(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.2.0")), trusted, signing.Over(d100))
			f.reg.Push(t, "app", "1.3.0")
			f.Repo(t, f.NS, "app", f.reg.Image("app"), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
			f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*"),
				Verify: &v1.OCIRepositoryVerification{Provider: v1.VerificationProviderNotation, SecretRef: &v1.LocalObjectReference{Name: "notation"}}})
			f.Put(t, f.NS, "app", "1.0.0", "1.1.0", "1.2.0", "1.3.0")
			out := f.Evaluate(t, f.NS, "app")
			if out.Result != reconcile.PolicySucceeded || out.Latest == nil || out.Latest.Tag != "1.0.0" {
				t.Fatalf("outcome %+v, want 1.0.0", out)
			}
			p := f.Get(t, f.NS, "app")
			evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "resolved to 1.0.0; skipped newer tags", Stalled: false})
			for _, want := range []string{"1.3.0 (not signed)", "1.2.0 (the Notation signature is over another digest",
				"1.1.0 (signed, but not by a certificate the trust policy trusts"} {
				if !strings.Contains(readyMessage(p), want) {
					t.Errorf("Ready message %q does not say %q", readyMessage(p), want)
				}
			}

			// Evaluating the unchanged repository again costs no registry request.
			before := f.reg.RequestCount()
			f.request(t, "app", "again")
			if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.0.0" {
				t.Fatalf("second outcome %+v", out)
			}
			if n := f.reg.RequestCount() - before; n != 0 {
				t.Errorf("evaluating an unchanged repository again made %d registry requests, want 0", n)
			}
		})
	}
}

// TestIntegrationVerifiedSelectionNotationBadSecret gives a notation policy a Secret whose
// certificate or trust policy does not parse: the policy is Stalled, says which entry is wrong
// without quoting it, and reads nothing from the registry.
func TestIntegrationVerifiedSelectionNotationBadSecret(t *testing.T) {
	f := newVerifyFixture(t)
	ca := signing.NewNotationCA(t)
	const planted = "c2VjcmV0LWtleS1tYXRlcmlhbA=="
	for _, tt := range []struct {
		name string
		data map[string][]byte
		want string
	}{
		{"bad-cert", map[string][]byte{"ca.crt": []byte("-----BEGIN PRIVATE KEY-----\n" + planted + "\n-----END PRIVATE KEY-----\n"),
			signature.TrustPolicyKey: signing.NotationTrustPolicy("*")}, `"ca.crt": PEM block 1 is of type "PRIVATE KEY", not CERTIFICATE`},
		{"bad-policy", map[string][]byte{"ca.crt": ca.CertPEM, signature.TrustPolicyKey: []byte(`{"version": "` + planted)},
			`"trustpolicy.json": not a JSON trust policy document`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.secret(t, tt.name, tt.data)
			f.reg.Push(t, tt.name, "1.0.0")
			f.Repo(t, f.NS, tt.name, f.reg.Image(tt.name), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
			f.Policy(t, f.NS, tt.name, v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo(tt.name), Policy: evaltest.Semver("*"),
				Verify: &v1.OCIRepositoryVerification{Provider: v1.VerificationProviderNotation, SecretRef: &v1.LocalObjectReference{Name: tt.name}}})
			f.Put(t, f.NS, tt.name, "1.0.0")
			before := f.reg.RequestCount()
			if out := f.Evaluate(t, f.NS, tt.name); out.Result != reconcile.PolicyStalled {
				t.Fatalf("outcome %+v, want Stalled", out)
			}
			p := f.Get(t, f.NS, tt.name)
			evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.VerificationErrorReason, Msg: "Secret " + f.NS + "/" + tt.name + ": invalid key material: " + tt.want, Stalled: true})
			if strings.Contains(readyMessage(p), planted[:12]) || strings.Contains(readyMessage(p), "BEGIN") {
				t.Errorf("the Ready message quotes the Secret: %q", readyMessage(p))
			}
			if n := f.reg.RequestCount() - before; n != 0 {
				t.Errorf("%d registry requests with an unusable Secret, want 0", n)
			}
		})
	}
}

// TestIntegrationVerifiedSelectionPublicGood selects by keyless signatures without a secretRef,
// under the trusted root of a TUF repository made for the test in place of the public-good one,
// configured through the policy function's environment: an image signed by another identity is
// skipped. With the repository unreachable, there is no verdict: the policy fails, not Stalled,
// keeps its latestRef and reads nothing from the registry.
func TestIntegrationVerifiedSelectionPublicGood(t *testing.T) {
	const issuer, subject = "https://token.actions.githubusercontent.com", "https://github.com/org/app/.github/workflows/release.yaml@refs/tags/v1"
	sigstore := signing.NewSigstore(t)
	tuf := signing.NewTUFRepository(t, map[string][]byte{"trusted_root.json": sigstore.TrustedRootWithoutCTJSON(t)})
	rootFile := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(rootFile, tuf.RootJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(signature.EnvTUFURL, tuf.URL())
	t.Setenv(signature.EnvTUFRoot, rootFile)
	t.Setenv(signature.EnvTUFCache, t.TempDir())
	verify := &v1.OCIRepositoryVerification{Provider: "cosign",
		MatchOIDCIdentity: []v1.OIDCIdentityMatch{{Issuer: "^" + issuer + "$", Subject: "^https://github.com/org/app/"}}}
	fixture := func(t *testing.T) *verifyFixture {
		f := newVerifyFixture(t)
		tr, err := signature.TUFFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		f.Ev.Verifier = func(spec *v1.OCIRepositoryVerification, data map[string][]byte) (reconcile.ImageVerifier, error) {
			return signature.New(spec, data, signature.WithTUFRoot(tr))
		}
		return f
	}

	t.Run("verified", func(t *testing.T) {
		f := fixture(t)
		signing.Keyless(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.0.0")), sigstore.Identity(subject, issuer))
		signing.Keyless(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.1.0")), sigstore.Identity("https://github.com/fork/app/.github/workflows/release.yaml@refs/tags/v1", issuer))
		f.Repo(t, f.NS, "app", f.reg.Image("app"), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
		f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*"), Verify: verify})
		f.Put(t, f.NS, "app", "1.0.0", "1.1.0")
		out := f.Evaluate(t, f.NS, "app")
		if out.Result != reconcile.PolicySucceeded || out.Latest == nil || out.Latest.Tag != "1.0.0" {
			t.Fatalf("outcome %+v, want 1.0.0", out)
		}
		evaltest.CheckReady(t, f.Get(t, f.NS, "app"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "1.1.0 (signed by https://xxxxx@refs/tags/v1 (issuer " + issuer + ") that matchOIDCIdentity does not match)", Stalled: false})
	})

	t.Run("TUF repository unreachable", func(t *testing.T) {
		tuf.SetDown(true)
		defer tuf.SetDown(false)
		// A process of its own, whose disk cache is empty.
		t.Setenv(signature.EnvTUFCache, t.TempDir())
		f := fixture(t)
		signing.Keyless(t, signing.In(f.reg, "app", f.reg.Push(t, "app", "1.0.0")), sigstore.Identity(subject, issuer))
		f.Repo(t, f.NS, "app", f.reg.Image("app"), func(r *v1.ImageRepository) { r.Spec.Insecure = true })
		f.Policy(t, f.NS, "app", v1.ImagePolicySpec{ImageRepositoryRef: evaltest.RefTo("app"), Policy: evaltest.Semver("*"), Verify: verify})
		f.Put(t, f.NS, "app", "1.0.0")
		kept := &v1.ImageRef{Name: f.reg.Image("app"), Tag: "0.9.0"}
		f.Seed(t, f.NS, "app", kept)
		before := f.reg.RequestCount()
		p := f.evaluateKeeps(t, f.NS, "app", kept)
		evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionFalse, Reason: v1.VerificationErrorReason, Msg: "the Sigstore trusted root could not be fetched from the TUF repository " + tuf.URL(), Stalled: false})
		if n := f.reg.RequestCount() - before; n != 0 {
			t.Errorf("%d registry requests without a trusted root, want 0", n)
		}
	})
}

// evaluateKeeps evaluates the policy, which must fail (not stall) and keep latestRef at kept, in
// its outcome and in its status, and returns the policy as evaluated.
func (f *evalFixture) evaluateKeeps(t *testing.T, ns, name string, kept *v1.ImageRef) *v1.ImagePolicy {
	t.Helper()
	out := f.Evaluate(t, ns, name)
	if out.Result != reconcile.PolicyFailed || !evaltest.SameRef(out.Latest, kept) {
		t.Fatalf("outcome %+v, want a failure, not Stalled, that keeps %s", out, evaltest.RefString(kept))
	}
	p := f.Get(t, ns, name)
	if !evaltest.SameRef(p.Status.LatestRef, kept) {
		t.Errorf("latestRef = %s, want %s kept", evaltest.RefString(p.Status.LatestRef), evaltest.RefString(kept))
	}
	return p
}

// evaluateSkips evaluates the policy, which must select tag with newer tags skipped, and returns
// the policy as evaluated.
func (f *evalFixture) evaluateSkips(t *testing.T, ns, name, tag string) *v1.ImagePolicy {
	t.Helper()
	out := f.Evaluate(t, ns, name)
	if out.Result != reconcile.PolicySucceeded || out.Latest == nil || out.Latest.Tag != tag {
		t.Fatalf("outcome %+v, want %s selected", out, tag)
	}
	p := f.Get(t, ns, name)
	evaltest.CheckReady(t, p, evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "resolved to " + tag + "; skipped newer tags", Stalled: false})
	// The cron reconciler and the evaluator learn of the skipped tags from the reason, not from
	// the message.
	if c := apimeta.FindStatusCondition(p.Status.Conditions, v1.TagsEvaluatedCondition); c == nil || c.Reason != v1.SkippedUnverifiedReason {
		t.Errorf("%s = %+v, want reason %s", v1.TagsEvaluatedCondition, c, v1.SkippedUnverifiedReason)
	}
	return p
}
