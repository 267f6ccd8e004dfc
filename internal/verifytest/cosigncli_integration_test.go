package verifytest_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestIntegrationVerifiedSelectionCosignCLI selects among tags signed by the real cosign CLI,
// with key pairs of `cosign generate-key-pair`, in both forms cosign v3 writes: the best tag
// signed with the trusted key pair becomes latest; newer ones, unsigned, signed with another
// key pair, carrying another image's copied signature or moved after their image was signed,
// are reported with why they were skipped; latestRef then moves neither to an unsigned or
// wrongly signed newer tag nor back, and moves up once the newer tag is signed.
func TestIntegrationVerifiedSelectionCosignCLI(t *testing.T) {
	cli := testenv.NewCosignCLI(t)
	trusted, other := cli.GenerateKeyPair(t), cli.GenerateKeyPair(t)
	for _, mode := range []struct {
		name string
		opts []testenv.RegistryOption
	}{{"referrers API", []testenv.RegistryOption{testenv.RegistryReferrers()}}, {"referrers tag schema", nil}} {
		t.Run(mode.name, func(t *testing.T) {
			f := newVerifyFixture(t, mode.opts...)
			f.secret(t, "cli-keys", map[string][]byte{"cosign.pub": trusted.PublicPEM})
			reg, image := f.reg, f.reg.Image("app")
			d100 := reg.Push(t, "app", "1.0.0")
			cli.Sign(t, trusted, image, d100, testenv.CosignBundle)
			cli.Sign(t, trusted, image, reg.Push(t, "app", "1.1.0"), testenv.CosignLegacySig)
			reg.Push(t, "app", "1.2.0")
			cli.Sign(t, other, image, reg.Push(t, "app", "1.3.0"), testenv.CosignBundle)
			cli.Sign(t, other, image, reg.Push(t, "app", "1.4.0"), testenv.CosignLegacySig)
			testenv.CosignReplay(t, image, d100, reg.Push(t, "app", "1.5.0"), testenv.CosignBundle)
			// 1.6.0 was signed, then pushed again: the tag's image now is another, unsigned one.
			cli.Sign(t, trusted, image, reg.Push(t, "app", "1.6.0"), testenv.CosignBundle)
			reg.Push(t, "app", "1.6.0")
			f.verifiedPolicy(t, "app", "cli-keys")
			tags := []string{"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0", "1.6.0"}
			f.Put(t, f.NS, "app", tags...)

			p := f.evaluateSkips(t, f.NS, "app", "1.1.0")
			t.Logf("Ready: %s", readyMessage(p))
			for _, want := range []string{"1.6.0 (not signed)", "1.5.0 (the signature bundle is over another digest)",
				"1.4.0 (signed, but no signature verifies with the trusted keys)",
				"1.3.0 (signed, but no signature bundle verifies with the trusted keys)", "1.2.0 (not signed)"} {
				if !strings.Contains(readyMessage(p), want) {
					t.Errorf("Ready message %q does not say %q", readyMessage(p), want)
				}
			}
			f.WaitEvent(t, "app", corev1.EventTypeWarning, v1.VerificationErrorReason, "1.2.0 (not signed)")

			// An unsigned newer tag, then the same signed with the other key pair, moves latestRef
			// neither up nor back.
			d200 := reg.Push(t, "app", "2.0.0")
			tags = append(tags, "2.0.0")
			f.Put(t, f.NS, "app", tags...)
			if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.1.0" || out.Changed {
				t.Fatalf("after an unsigned 2.0.0: %+v, want 1.1.0 kept", out)
			}
			cli.Sign(t, other, image, d200, testenv.CosignBundle)
			f.advance(reconcile.UnverifiedTTL)
			f.request(t, "app", "other-key")
			if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "1.1.0" || out.Changed {
				t.Fatalf("after 2.0.0 signed with another key pair: %+v, want 1.1.0 kept", out)
			}
			if msg := readyMessage(f.Get(t, f.NS, "app")); !strings.Contains(msg, "2.0.0 (signed, but no signature bundle verifies") {
				t.Errorf("Ready message %q does not report 2.0.0's signature by another key pair", msg)
			}

			// Signed with the trusted key pair, it is taken once the refusal is no longer remembered.
			cli.Sign(t, trusted, image, d200, testenv.CosignLegacySig)
			f.advance(reconcile.UnverifiedTTL)
			f.request(t, "app", "trusted-key")
			if out := f.Evaluate(t, f.NS, "app"); out.Latest == nil || out.Latest.Tag != "2.0.0" || !out.Changed {
				t.Fatalf("after signing 2.0.0: %+v, want 2.0.0", out)
			}
			evaltest.CheckReady(t, f.Get(t, f.NS, "app"), evaltest.WantReady{Status: metav1.ConditionTrue, Reason: v1.SucceededReason, Msg: "updated from 1.1.0 to 2.0.0", Stalled: false})
		})
	}
}
