package stack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/signing"
)

// plainPolicy is an ImagePolicy without spec.verify over the repository of verifiedManifests.
const plainPolicy = `
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: plain
spec:
  imageRepositoryRef:
    name: signed
  policy:
    semver:
      range: ^1.x
`

// BenchmarkSignedPushToLatest measures, over the whole system as separate processes, a push of a
// signed image as a pipeline makes it into docker-registry: the image pushed under a new tag,
// then signed. Two ImagePolicies select from the repository, one with spec.verify (cosign, a
// key of the Secret) and one without. Reported: signed_p50_ms and signed_p99_ms, from the end of
// the signature's push until the verifying policy's latestRef shows the tag (polled every 5 ms,
// as in BenchmarkPushToLatest); plain_p50_ms and plain_p99_ms, from the end of the image's push
// until the other policy's does; reflector's registry requests per push by kind (a proxy in
// front of docker-registry counts them, as in BenchmarkPushBurst). docker-registry notifies the
// scan function of both pushes; a verifying evaluation that ran before the signature arrived
// refuses the tag, and the signature's own notification brings it in. The sub-benchmarks differ
// in the signature's form: a Sigstore bundle under the referrers tag schema (cosign v3's default
// on a registry without the referrers API; its tag is a new entry of the tag list) or cosign's
// legacy .sig tag (which the default exclusionList drops, so its scan changes no list and names
// the signed image). Each runs with the functions' registry rate limit lifted and at 10 requests
// a second to one host (the default), and starts its own stack once.
func BenchmarkSignedPushToLatest(b *testing.B) {
	for _, form := range []string{"bundle", "legacy"} {
		for _, limit := range []string{"none", "10"} {
			var vb *verifyBench
			b.Run(fmt.Sprintf("signature=%s/registry_rate=%s", form, limit), func(sub *testing.B) {
				if vb == nil {
					vb = newVerifyBench(b, form, limit)
				}
				vb.run(sub)
			})
			// An idle stack keeps its cron pass and interval scans: stopped, it takes no CPU from
			// the sub-benchmarks after it.
			if vb != nil {
				_ = vb.s.Stop()
			}
		}
	}
}

type verifyBench struct {
	s       *stack.Stack
	counter *requestCounter
	image   string
	key     *signing.CosignKey
	form    string
	pushed  int
}

// newVerifyBench starts the stack of signatures of form with both functions' registry rate
// limit (REFLECTOR_REGISTRY_RATE) at limit, "none" for none.
func newVerifyBench(b *testing.B, form, limit string) *verifyBench {
	ctx := context.Background()
	env := []string{registryRate(limit)}
	s, counter, host := startCounted(b, env, env)
	vb := &verifyBench{s: s, counter: counter, image: host + "/bench/signed",
		key: signing.NewCosignKey(b), form: form}
	// As many tags as BenchmarkPushToLatest's smaller repository, the seed selected by neither
	// policy.
	if err := pushTags(ctx, vb.image, testenv.RegistryTags("seed-", 99)); err != nil {
		b.Fatal(err)
	}
	waitNotified(b, s)
	vb.sign(b, vb.push(b, "1.0.0"))
	indented := "    " + strings.ReplaceAll(strings.TrimSpace(string(vb.key.PublicPEM)), "\n", "\n    ")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(verifiedManifests, vb.image, indented)+plainPolicy)); err != nil {
		b.Fatal(err)
	}
	waitForPolicy(b, s, "signed", "1.0.0")
	waitForPolicy(b, s, "plain", "1.0.0")
	return vb
}

func (vb *verifyBench) push(b *testing.B, tag string) string {
	b.Helper()
	d, err := stack.Push(vb.image + ":" + tag)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func (vb *verifyBench) sign(b *testing.B, digest string) {
	b.Helper()
	if vb.form == "legacy" {
		signing.Legacy(b, signing.At(vb.image, digest), vb.key)
		return
	}
	signing.Bundle(b, signing.At(vb.image, digest), vb.key)
}

func (vb *verifyBench) run(b *testing.B) {
	var signed, plain []time.Duration
	// The seed's and the last iteration's evaluations may still read the registry.
	settle(b, func() float64 {
		n := 0
		for _, v := range vb.counter.counts() {
			n += v
		}
		return float64(n)
	})
	vb.counter.reset()
	b.ResetTimer()
	for range b.N {
		vb.pushed++
		tag := fmt.Sprintf("1.%d.0", vb.pushed)
		d := vb.push(b, tag)
		pushed := time.Now()
		vb.sign(b, d)
		signEnd := time.Now()
		var plainAt, signedAt time.Time
		testenv.EventuallyEvery(b, 30*time.Second, 5*time.Millisecond, func() error {
			for _, p := range []struct {
				name string
				at   *time.Time
			}{{"plain", &plainAt}, {"signed", &signedAt}} {
				if !p.at.IsZero() {
					continue
				}
				pol, err := vb.s.Kube.Policies.Get(context.Background(), "default", p.name)
				if err != nil {
					return err
				}
				if pol.Status.LatestRef != nil && pol.Status.LatestRef.Tag == tag {
					*p.at = time.Now()
				}
			}
			if plainAt.IsZero() || signedAt.IsZero() {
				return fmt.Errorf("%s: not every policy shows it yet", tag)
			}
			return nil
		})
		plain = append(plain, plainAt.Sub(pushed))
		signed = append(signed, max(0, signedAt.Sub(signEnd)))
	}
	b.StopTimer()
	// The requests of the last push's evaluations, which may end after its latestRef is seen.
	settle(b, func() float64 {
		n := 0
		for _, v := range vb.counter.counts() {
			n += v
		}
		return float64(n)
	})
	total := 0
	for kind, n := range vb.counter.counts() {
		b.ReportMetric(float64(n)/float64(b.N), "registry_"+kind+"/push")
		total += n
	}
	b.ReportMetric(float64(total)/float64(b.N), "registry_requests/push")
	reportPercentiles(b, "signed", signed)
	reportPercentiles(b, "plain", plain)
}
