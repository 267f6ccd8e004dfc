package stack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/signing"
)

const verifiedManifests = `apiVersion: v1
kind: Secret
metadata:
  name: cosign-keys
stringData:
  cosign.pub: |
%[2]s
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: signed
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: signed
spec:
  imageRepositoryRef:
    name: signed
  policy:
    semver:
      range: ^1.x
  verify:
    provider: cosign
    secretRef:
      name: cosign-keys
`

// TestVerifiedPushIntegration pushes images into docker-registry, which has no referrers API,
// and signs some of them as cosign v3 does by default (a Sigstore bundle, indexed under the
// referrers tag schema): through the whole system, an unsigned push is skipped and reported,
// and the signature of an image pushed before brings it to latestRef.
//
// The signatures are made by testenv in the formats cosign writes;
// TestVerifiedPushCosignCLIIntegration has the cosign CLI itself make them.
func TestVerifiedPushIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: time.Hour})
	key := signing.NewCosignKey(t)
	image := s.Registry + "/verified/app"
	indented := "    " + strings.ReplaceAll(strings.TrimSpace(string(key.PublicPEM)), "\n", "\n    ")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(verifiedManifests, image, indented))); err != nil {
		t.Fatal(err)
	}

	d100, err := stack.Push(image + ":1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	signing.Bundle(t, signing.At(image, d100), key)
	waitLatest(t, s, "signed", "1.0.0")

	d110, err := stack.Push(image + ":1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		p, err := s.Kube.Policies.Get(ctx, "default", "signed")
		if err != nil {
			return err
		}
		ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition)
		if ready == nil || !strings.Contains(ready.Message, "1.1.0 (not signed)") {
			return fmt.Errorf("the unsigned 1.1.0 is not reported yet: %+v", ready)
		}
		if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != "1.0.0" {
			return fmt.Errorf("latestRef %+v, want 1.0.0 kept", p.Status.LatestRef)
		}
		return nil
	})

	signed := time.Now()
	signing.Bundle(t, signing.At(image, d110), key)
	waitLatest(t, s, "signed", "1.1.0")
	t.Logf("signature of 1.1.0 to latestRef: %v", time.Since(signed).Round(time.Millisecond))
}

// TestVerifiedPushCosignCLIIntegration signs images pushed into docker-registry with the real
// cosign CLI and key pairs of `cosign generate-key-pair`, through the whole system: 1.0.0,
// signed in the legacy .sig tag form before the ImageRepository exists, is selected by the
// first scan; 1.1.0, pushed unsigned, is reported and latestRef kept, and its signature in the
// legacy form, whose tag the default exclusionList drops, brings it to latestRef; 1.2.0, signed
// by another key pair in cosign's default form (a Sigstore bundle under the referrers tag
// schema), is refused and latestRef stays on 1.1.0, until its second signature, by the trusted
// key pair, rewrites the referrers tag and brings it to latestRef. Neither signature that
// follows a refusal changes the stored tag list: the scan of its push names the signed image.
func TestVerifiedPushCosignCLIIntegration(t *testing.T) {
	ctx := context.Background()
	cli := testenv.NewCosignCLI(t)
	trusted, other := cli.GenerateKeyPair(t), cli.GenerateKeyPair(t)
	s := start(t, stack.Options{CronEvery: time.Hour})
	image := s.Registry + "/verified/app"

	d100, err := stack.Push(image + ":1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	cli.Sign(t, trusted, image, d100, testenv.CosignLegacySig)
	indented := "    " + strings.ReplaceAll(strings.TrimSpace(string(trusted.PublicPEM)), "\n", "\n    ")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(verifiedManifests, image, indented))); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "signed", "1.0.0")

	d110, err := stack.Push(image + ":1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	waitReported(t, s, "1.1.0 (not signed)", "1.0.0")
	signed := time.Now()
	cli.Sign(t, trusted, image, d110, testenv.CosignLegacySig)
	waitLatest(t, s, "signed", "1.1.0")
	t.Logf("cosign sign (legacy .sig) of 1.1.0 returned to latestRef: %v", time.Since(signed).Round(time.Millisecond))

	d120, err := stack.Push(image + ":1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	cli.Sign(t, other, image, d120, testenv.CosignBundle)
	waitReported(t, s, "1.2.0 (signed, but no signature bundle verifies with the trusted keys)", "1.1.0")
	signed = time.Now()
	cli.Sign(t, trusted, image, d120, testenv.CosignBundle)
	waitLatest(t, s, "signed", "1.2.0")
	t.Logf("second cosign sign (bundle) of 1.2.0 returned to latestRef: %v", time.Since(signed).Round(time.Millisecond))
}

// waitReported waits until the policy "signed" reports why in its Ready message with latestRef
// on the tag kept.
func waitReported(t *testing.T, s *stack.Stack, why, kept string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		p, err := s.Kube.Policies.Get(context.Background(), "default", "signed")
		if err != nil {
			return err
		}
		ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition)
		if ready == nil || !strings.Contains(ready.Message, why) {
			return fmt.Errorf("%q is not reported yet: %+v", why, ready)
		}
		if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != kept {
			return fmt.Errorf("latestRef %+v, want %s kept", p.Status.LatestRef, kept)
		}
		return nil
	})
}

const notationManifests = `apiVersion: v1
kind: Secret
metadata:
  name: notation-trust
stringData:
  trustpolicy.json: '%[2]s'
  ca.crt: |
%[3]s
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: notation
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: notation
spec:
  imageRepositoryRef:
    name: notation
  policy:
    semver:
      range: ^1.x
  verify:
    provider: notation
    secretRef:
      name: notation-trust
`

// TestVerifiedPushNotationIntegration is TestVerifiedPushIntegration with Notation signatures,
// made by notation-go and pushed under the referrers tag schema of docker-registry, verified by
// the policy function's process under the trust policy and CA of a Secret.
func TestVerifiedPushNotationIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: time.Hour})
	ca := signing.NewNotationCA(t)
	image := s.Registry + "/notation/app"
	indented := "    " + strings.ReplaceAll(strings.TrimSpace(string(ca.CertPEM)), "\n", "\n    ")
	manifests := fmt.Sprintf(notationManifests, image, signing.NotationTrustPolicy(image), indented)
	if _, err := s.Env.Apply(ctx, "default", []byte(manifests)); err != nil {
		t.Fatal(err)
	}

	d100, err := stack.Push(image + ":1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	signing.Notation(t, signing.At(image, d100), ca)
	waitLatest(t, s, "notation", "1.0.0")

	d110, err := stack.Push(image + ":1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		p, err := s.Kube.Policies.Get(ctx, "default", "notation")
		if err != nil {
			return err
		}
		ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition)
		if ready == nil || !strings.Contains(ready.Message, "1.1.0 (not signed)") {
			return fmt.Errorf("the unsigned 1.1.0 is not reported yet: %+v", ready)
		}
		return nil
	})
	signing.Notation(t, signing.At(image, d110), ca)
	waitLatest(t, s, "notation", "1.1.0")
}
