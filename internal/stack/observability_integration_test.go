package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/trace"
)

const observedManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: app
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: frozen
spec:
  image: %[1]s
  interval: 1h
  insecure: true
  suspend: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: stable
spec:
  imageRepositoryRef:
    name: app
  policy:
    semver:
      range: ^1.x
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: frozen
spec:
  imageRepositoryRef:
    name: app
  suspend: true
  policy:
    semver:
      range: ^1.x
`

// sink is an HTTP CloudEvents receiver that keeps what it gets.
type sink struct {
	mu  sync.Mutex
	got []cloudevents.Event
}

func (k *sink) handle(_ context.Context, e cloudevents.Event) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.got = append(k.got, e)
	return nil
}

func (k *sink) events() []cloudevents.Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.got)
}

// TestObservabilityIntegration follows one push through the real processes: the Flux reconcile
// histogram and reflector's counters move on the functions' and the cron loop's /metrics,
// suspended objects move nothing, and the push's trace id is in the webhook's answer, in the
// log lines of both functions and in the CloudEvent the policy function emits.
func TestObservabilityIntegration(t *testing.T) {
	ctx := context.Background()
	k := &sink{}
	sinkSrv := httptest.NewServer(events.Handler(k.handle))
	t.Cleanup(sinkSrv.Close)
	s := start(t, stack.Options{
		CronEvery: 2 * time.Second,
		Env:       map[string][]string{stack.Policy: {"K_SINK=" + sinkSrv.URL}},
	})

	// A registry without notifications: the webhook below is the only news of the push.
	reg := testenv.NewRegistry(t)
	image := reg.Image("obs/app")
	reg.Push(t, "obs/app", "1.0.0")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(observedManifests, image))); err != nil {
		t.Fatal(err)
	}
	// The cron reconciler's first pass scans the new repository.
	waitLatest(t, s, "stable", "1.0.0")

	scanBefore := testenv.Scrape(t, s.Metrics[stack.Scan])
	policyBefore := testenv.Scrape(t, s.Metrics[stack.Policy])

	digest := reg.Push(t, "obs/app", "1.1.0")
	parent := trace.New()
	body := fmt.Sprintf(`{"events":[{"id":"obs-1","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"obs/app","tag":"1.1.0","digest":%q},"request":{"host":%q}}]}`, digest, reg.Host())
	answer := postWebhook(t, s, body, "Bearer "+s.Token, parent.String())
	if answer.status != http.StatusAccepted {
		t.Fatalf("webhook answered %d %+v", answer.status, answer.Answer)
	}
	traceID := parent.TraceIDString()
	if answer.TraceID != traceID {
		t.Errorf("the answer names trace %q, want the traceparent's %q", answer.TraceID, traceID)
	}
	if forged := postWebhook(t, s, body, "Bearer wrong", ""); forged.status != http.StatusUnauthorized {
		t.Errorf("forged webhook answered %d", forged.status)
	}
	waitLatest(t, s, "stable", "1.1.0")

	t.Run("the push's trace id follows it through both functions", func(t *testing.T) {
		var emitted cloudevents.Event
		testenv.Eventually(t, 10*time.Second, func() error {
			got := k.events()
			for _, e := range got {
				var d events.LatestChanged
				if e.Type() == events.TypeLatestChanged && e.DataAs(&d) == nil && d.Latest != nil && d.Latest.Tag == "1.1.0" {
					emitted = e
					return nil
				}
			}
			return fmt.Errorf("the policy function emitted no LatestChanged for 1.1.0; got %d events", len(got))
		})
		tp, _ := emitted.Extensions()[trace.Header].(string)
		got, err := trace.Parse(tp)
		if err != nil || got.TraceIDString() != traceID {
			t.Errorf("LatestChanged carries traceparent %q (%v), want trace %s", tp, err, traceID)
		}
		if got.SpanID == parent.SpanID {
			t.Error("the emitted event names the webhook's sender as its parent, not the policy function")
		}
		wantLines(t, s.Log(stack.Scan), traceID, "webhook", "scan")
		wantLines(t, s.Log(stack.Policy), traceID, "event handled", "evaluated ImagePolicy")
	})

	t.Run("the Flux histogram and reflector's counters moved", func(t *testing.T) {
		scanAfter := testenv.Scrape(t, s.Metrics[stack.Scan])
		policyAfter := testenv.Scrape(t, s.Metrics[stack.Policy])
		moved := func(before, after testenv.Metrics, name string, labels map[string]string, atLeast float64) {
			t.Helper()
			b, _ := before.Value(name, labels)
			a, ok := after.Value(name, labels)
			if !ok || a-b < atLeast {
				t.Errorf("%s%v: %v -> %v, want a rise of at least %v", name, labels, b, a, atLeast)
			}
		}
		const gotk = "gotk_reconcile_duration_seconds"
		moved(scanBefore, scanAfter, gotk, map[string]string{"kind": "ImageRepository", "namespace": "default", "name": "app"}, 1)
		moved(policyBefore, policyAfter, gotk, map[string]string{"kind": "ImagePolicy", "namespace": "default", "name": "stable"}, 1)
		moved(scanBefore, scanAfter, "reflector_webhook_requests_total", map[string]string{"provider": "distribution", "result": "accepted"}, 1)
		moved(scanBefore, scanAfter, "reflector_webhook_requests_total", map[string]string{"provider": "distribution", "result": "unauthenticated"}, 1)
		moved(scanBefore, scanAfter, "reflector_registry_requests_total", map[string]string{"host": reg.Host()}, 1)
		moved(scanBefore, scanAfter, "reflector_events_sent_total", map[string]string{"type": events.TypeTagsChanged, "result": "acknowledged"}, 1)
		moved(policyBefore, policyAfter, "reflector_events_sent_total", map[string]string{"type": events.TypeLatestChanged, "result": "acknowledged"}, 1)
		moved(scanBefore, scanAfter, "reflector_store_lock_wait_seconds", map[string]string{"mode": "write"}, 1)
		if n, _ := scanAfter.Value("reflector_repository_tags", map[string]string{"namespace": "default", "name": "app"}); n != 2 {
			t.Errorf("reflector_repository_tags of app = %v, want 2", n)
		}

		// Flux's buckets, so that Flux's dashboards read reflector's histogram.
		want := prometheus.ExponentialBucketsRange(10e-3, 1800, 10)
		for _, m := range scanAfter[gotk].GetMetric() {
			var got []float64
			for _, b := range m.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					got = append(got, b.GetUpperBound())
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("buckets %v, want Flux's %v", got, want)
			}
			break
		}

		// Bounded labels: no tag, digest or delivery id anywhere.
		for _, m := range []testenv.Metrics{scanAfter, policyAfter} {
			for name, fam := range m {
				for _, series := range fam.GetMetric() {
					for _, l := range series.GetLabel() {
						if v := l.GetValue(); strings.Contains(v, "1.1.0") || strings.Contains(v, "sha256:") || v == "obs-1" {
							t.Errorf("%s has the label %s=%q", name, l.GetName(), v)
						}
					}
				}
			}
		}
	})

	t.Run("suspended objects move nothing", func(t *testing.T) {
		for _, m := range []testenv.Metrics{testenv.Scrape(t, s.Metrics[stack.Scan]), testenv.Scrape(t, s.Metrics[stack.Policy])} {
			if m.Has("gotk_reconcile_duration_seconds", map[string]string{"name": "frozen"}) {
				t.Error("a suspended object was recorded in gotk_reconcile_duration_seconds")
			}
		}
		// The webhook matched the suspended repository too: it was annotated and skipped.
		frozen, err := s.Kube.Repositories.Get(ctx, "default", "frozen")
		if err != nil {
			t.Fatal(err)
		}
		if frozen.Status.LastScanResult != nil {
			t.Error("the suspended repository was scanned")
		}
	})

	t.Run("the cron loop serves its pass summary", func(t *testing.T) {
		testenv.Eventually(t, 10*time.Second, func() error {
			m := testenv.Scrape(t, s.Metrics[stack.Cron])
			passes, _ := m.Value("reflector_cron_passes_total", map[string]string{"result": "succeeded"})
			repos, _ := m.Value("reflector_cron_last_pass_objects", map[string]string{"count": "repositories"})
			if passes < 1 || repos != 2 {
				return fmt.Errorf("cron metrics: %v passes, %v repositories in the last", passes, repos)
			}
			return nil
		})
	})
}

type webhookAnswer struct {
	status int
	receiver.Answer
}

func postWebhook(t *testing.T, s *stack.Stack, body, auth, traceparent string) webhookAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/distribution/default", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
	req.Header.Set("Authorization", auth)
	if traceparent != "" {
		req.Header.Set(trace.Header, traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := webhookAnswer{status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&a.Answer); err != nil {
		t.Fatalf("webhook answer: %v", err)
	}
	return a
}

// wantLines checks that the log at path has a line with each message carrying traceID.
func wantLines(t *testing.T, path, traceID string, msgs ...string) {
	t.Helper()
	// A function logs a request once it is done with it, which may be after the effect the test
	// waited for: the scan writes the repository status after the policies heard of its tags.
	testenv.Eventually(t, 10*time.Second, func() error {
		seen := linesOf(t, path, traceID)
		for _, m := range msgs {
			if !seen[m] {
				return fmt.Errorf("%s: no %q line with trace_id %s (lines with it: %v)", path, m, traceID, seen)
			}
		}
		return nil
	})
}

// linesOf returns the messages of the lines of the log at path that carry traceID.
func linesOf(t *testing.T, path, traceID string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			TraceID string `json:"trace_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.TraceID == traceID {
			seen[line.Msg] = true
		}
	}
	return seen
}
