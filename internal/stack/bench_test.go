package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
)

// BenchmarkPushToLatest measures, over the whole system as separate processes, the time from a
// push to the ImagePolicy's new latestRef: once through docker-registry's own notifications
// (registry_p50_ms, registry_p99_ms, which include the registry's notification delay) and once
// from a webhook's arrival at the scan function (webhook_p50_ms, webhook_p99_ms). b.N counts
// pushes of each kind.
func BenchmarkPushToLatest(b *testing.B) {
	if _, err := exec.LookPath("docker-registry"); err != nil {
		b.Skip("docker-registry is not installed: run `make deps`")
	}
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{Dir: b.TempDir(), CronEvery: time.Minute, NotifyBackoff: 200 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	image := s.Registry + "/bench/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(manifests, image))); err != nil {
		b.Fatal(err)
	}
	waitFor := func(tag string) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			p, err := s.Kube.Policies.Get(ctx, "default", "stable")
			if err == nil && p.Status.LatestRef != nil && p.Status.LatestRef.Tag == tag {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.Fatalf("latestRef never reached %s", tag)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		b.Fatal(err)
	}
	waitFor("1.0.0")

	var viaRegistry, viaWebhook []time.Duration
	b.ResetTimer()
	for i := range b.N {
		tag := fmt.Sprintf("1.%d.0", 2*i+1)
		digest, err := stack.Push(image + ":" + tag)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		waitFor(tag)
		viaRegistry = append(viaRegistry, time.Since(start))

		// The next push is announced straight to the scan function as well; whichever of the
		// registry's notification and this webhook arrives first, the time is counted from the
		// webhook's send, so it excludes the push and the registry's notification delay.
		tag = fmt.Sprintf("1.%d.0", 2*i+2)
		if digest, err = stack.Push(image + ":" + tag); err != nil {
			b.Fatal(err)
		}
		body := fmt.Sprintf(`{"events":[{"id":"bench-%d","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"bench/app","tag":%q,"digest":%q},"request":{"host":%q}}]}`,
			i, tag, digest, s.Registry)
		req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/distribution/default", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
		req.Header.Set("Authorization", "Bearer "+s.Token)
		start = time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		waitFor(tag)
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
