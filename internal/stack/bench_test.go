package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

const directManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: direct
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: direct
spec:
  imageRepositoryRef:
    name: direct
  policy:
    semver:
      range: ^1.x
`

// BenchmarkPushToLatest measures, over the whole system as separate processes, the time from a
// push to the ImagePolicy's new latestRef: once through docker-registry's own notifications
// (registry_p50_ms, registry_p99_ms, which include the registry's notification delay) and once
// from the sending of a webhook to the scan function for a registry that notifies nobody else
// (webhook_p50_ms, webhook_p99_ms). b.N counts pushes of each kind.
func BenchmarkPushToLatest(b *testing.B) {
	ctx := context.Background()
	s := start(b, stack.Options{CronEvery: time.Minute, NotifyBackoff: 200 * time.Millisecond})
	image := s.Registry + "/bench/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(manifests, image))); err != nil {
		b.Fatal(err)
	}
	waitFor := func(tag string) { waitForPolicy(b, s, "stable", tag) }
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		b.Fatal(err)
	}
	waitFor("1.0.0")

	// A second repository lives in an in-process registry that sends no notifications, so that
	// the only announcement of its pushes is the benchmark's own webhook.
	direct := testenv.NewRegistry(b)
	directImage := direct.Image("bench/direct")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(directManifests, directImage))); err != nil {
		b.Fatal(err)
	}
	direct.Push(b, "bench/direct", "1.0.0")
	hook(b, s, directImage, "bench/direct", "1.0.0", "warmup")
	waitForPolicy(b, s, "direct", "1.0.0")

	var viaRegistry, viaWebhook []time.Duration
	b.ResetTimer()
	for i := range b.N {
		tag := fmt.Sprintf("1.%d.0", i+1)
		if _, err := stack.Push(image + ":" + tag); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		waitFor(tag)
		viaRegistry = append(viaRegistry, time.Since(start))

		direct.Push(b, "bench/direct", tag)
		start = time.Now()
		hook(b, s, directImage, "bench/direct", tag, fmt.Sprintf("bench-%d", i))
		waitForPolicy(b, s, "direct", tag)
		viaWebhook = append(viaWebhook, time.Since(start))
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"_p50_ms")
		b.ReportMetric(float64(d[(len(d)*99)/100].Microseconds())/1000, name+"_p99_ms")
	}
	report("registry", viaRegistry)
	report("webhook", viaWebhook)
}

// hook sends the scan function a distribution notification of a push of repo:tag in image's
// registry, authenticated with the stack's token.
func hook(b *testing.B, s *stack.Stack, image, repo, tag, id string) {
	b.Helper()
	host := strings.SplitN(image, "/", 2)[0]
	body := fmt.Sprintf(`{"events":[{"id":%q,"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":%q,"tag":%q},"request":{"host":%q}}]}`,
		id, repo, tag, host)
	req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/distribution/default", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("webhook answered %d", resp.StatusCode)
	}
}

// waitForPolicy polls until the ImagePolicy default/name resolves to tag.
func waitForPolicy(b *testing.B, s *stack.Stack, name, tag string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p, err := s.Kube.Policies.Get(context.Background(), "default", name)
		if err == nil && p.Status.LatestRef != nil && p.Status.LatestRef.Tag == tag {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("policy %s never reached %s", name, tag)
}
