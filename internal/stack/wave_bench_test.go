package stack_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	imagev1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
)

const waveManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: wave-%[2]d
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: wave-%[2]d
spec:
  imageRepositoryRef:
    name: wave-%[2]d
  policy:
    semver:
      range: ^1.x
---
`

// waveRepos is how many repositories a release wave pushes into, waveSpread the time over which
// their pushes start.
const (
	waveRepos  = 200
	waveSpread = time.Second
)

// BenchmarkReleaseWave pushes, as a release of many services does, one new tag into each of
// 200 repositories of docker-registry within one second (a push starts every 5 ms, each in its
// own goroutine) and waits until each repository's ImagePolicy shows its tag. docker-registry
// notifies the scan function of every push, one notification after the other, as it does; the
// scan function's webhook rate limit is lifted, as in BenchmarkPushToLatest, because its
// default of 10 deliveries a second would refuse most of the wave and leave docker-registry
// retrying. Each push is a manifest: the image's blobs were uploaded before the wave. An
// iteration is one wave, each of a new tag.
//
// Reported: makespan_ms, from the first push's start until the last ImagePolicy showed its tag;
// pushes_ms, until the last push was answered; push_p50_ms and push_p99_ms, from the end of each
// push to its ImagePolicy's latestRef as a watch sees it; registry requests of reflector per push
// by kind (counted by a proxy in front of docker-registry, as in BenchmarkPushBurst);
// apiserver writes per push by resource (apiserver_request_total), and path_writes/push, those
// of ImageRepositories and ImagePolicies (not the Events, which client-go's recorder sends in the
// background, nor the apiserver's own leases); the CPU time per push of
// the apiserver (its process_cpu_seconds_total) and of each function (/proc/<pid>/stat); the
// policy function's store calls per push (each call waits once for the store: zero when every
// policy is advanced by the scan's delta); and each function's peak RSS (VmHWM).
//
// The sub-benchmarks differ in the scan function's registry rate limit: its default of 10
// requests a second to one registry host, which confirms a wave's 200 pushes in about 20 s, and
// none (REFLECTOR_REGISTRY_RATE=0). Each starts its own stack once.
func BenchmarkReleaseWave(b *testing.B) {
	for _, limit := range []struct{ name, rate string }{{"registry_rate=10", ""}, {"registry_rate=none", "0"}} {
		var wb *waveBench
		b.Run(limit.name, func(sub *testing.B) {
			if wb == nil {
				wb = newWaveBench(b, limit.rate)
			}
			wb.run(sub)
		})
		// An idle stack keeps its cron pass and interval scans: stopped, it takes no CPU from
		// the sub-benchmarks after it.
		if wb != nil {
			_ = wb.s.Stop()
		}
	}
}

// waveBench is one stack with waveRepos repositories in docker-registry, reached through a
// counting proxy, each with one ImagePolicy.
type waveBench struct {
	s       *stack.Stack
	counter *requestCounter
	host    string
	pusher  *remote.Pusher
	img     v1.Image
	waves   int
}

func (wb *waveBench) image(r int) string { return fmt.Sprintf("%s/wave/app-%d", wb.host, r) }

func (wb *waveBench) push(ctx context.Context, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return err
	}
	return wb.pusher.Push(ctx, tag, img)
}

// newWaveBench starts the stack of a wave, with the scan function's registry rate limit rate
// (REFLECTOR_REGISTRY_RATE; empty for the default).
func newWaveBench(b *testing.B, rate string) *waveBench {
	ctx := context.Background()
	var env []string
	if rate != "" {
		env = append(env, "REFLECTOR_REGISTRY_RATE="+rate)
	}
	s, counter, host := startCounted(b, env, nil)
	pusher, err := remote.NewPusher()
	if err != nil {
		b.Fatal(err)
	}
	wb := &waveBench{s: s, counter: counter, host: host, pusher: pusher}
	seed, err := random.Image(256, 1)
	if err != nil {
		b.Fatal(err)
	}
	if wb.img, err = random.Image(256, 1); err != nil {
		b.Fatal(err)
	}
	d, err := wb.img.Digest()
	if err != nil {
		b.Fatal(err)
	}
	// Every repository gets its first tag, and the wave's image by digest (its blobs and its
	// manifest, no tag), before the ImageRepositories exist: these notifications match nothing.
	var manifests strings.Builder
	var g sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, waveRepos)
	for range 8 {
		g.Go(func() {
			for r := range work {
				if err := wb.push(ctx, wb.image(r)+":1.0.0", seed); err != nil {
					errs <- err
					continue
				}
				ref, err := name.NewDigest(wb.image(r)+"@"+d.String(), name.Insecure)
				if err == nil {
					err = wb.pusher.Push(ctx, ref, wb.img)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for r := range waveRepos {
		work <- r
		fmt.Fprintf(&manifests, waveManifests, wb.image(r), r)
	}
	close(work)
	g.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	waitNotified(b, s)
	if _, err := s.Env.Apply(ctx, "default", []byte(manifests.String())); err != nil {
		b.Fatal(err)
	}
	for r := range waveRepos {
		waitTag(b, s, fmt.Sprintf("wave-%d", r), "1.0.0")
	}
	return wb
}

func (wb *waveBench) run(b *testing.B) {
	ctx := context.Background()
	s := wb.s
	var latencies []time.Duration
	var makespan, pushing time.Duration
	// The first scans' Events and statuses may still be on their way.
	writeCount := func() float64 {
		n := 0.0
		for _, v := range apiserverWrites(b, s) {
			n += v
		}
		return n
	}
	settle(b, writeCount)
	writesBefore := apiserverWrites(b, s)
	waitsBefore := storeWaits(b, s)
	cpuBefore := cpuSeconds(b, s)
	wb.counter.reset()
	b.ResetTimer()
	for range b.N {
		wb.waves++
		tag := fmt.Sprintf("1.%d.0", wb.waves)
		w := watchPolicies(b, s, tag)
		ended := make([]time.Time, waveRepos)
		errs := make(chan error, waveRepos)
		var g sync.WaitGroup
		began := time.Now()
		for r := range waveRepos {
			time.Sleep(time.Until(began.Add(time.Duration(r) * waveSpread / waveRepos)))
			g.Go(func() {
				if err := wb.push(ctx, wb.image(r)+":"+tag, wb.img); err != nil {
					errs <- err
				}
				ended[r] = time.Now()
			})
		}
		g.Wait()
		pushing += time.Since(began)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		seen := w.wait(b, 3*time.Minute)
		last := began
		for r, at := range seen {
			latencies = append(latencies, at.Sub(ended[r]))
			last = later(last, at)
		}
		makespan += last.Sub(began)
	}
	b.StopTimer()
	// What the waves started in the background: Events, and scans still reading the registry.
	settle(b, func() float64 {
		n := 0
		for _, v := range wb.counter.counts() {
			n += v
		}
		return writeCount() + float64(n)
	})
	requests := wb.counter.counts()
	pushes := float64(b.N * waveRepos)
	n := float64(b.N)
	b.ReportMetric(float64(makespan.Milliseconds())/n, "makespan_ms")
	b.ReportMetric(float64(pushing.Milliseconds())/n, "pushes_ms")
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "push_p50_ms")
	b.ReportMetric(float64(latencies[(len(latencies)*99)/100].Microseconds())/1000, "push_p99_ms")
	total := 0
	for _, k := range []string{"ping", "head", "list", "other"} {
		b.ReportMetric(float64(requests[k])/pushes, "registry_"+k+"/push")
		total += requests[k]
	}
	b.ReportMetric(float64(total)/pushes, "registry_req/push")
	writes, all, path := apiserverWrites(b, s), 0.0, 0.0
	for k, v := range writes {
		d := v - writesBefore[k]
		if d <= 0 {
			continue
		}
		b.ReportMetric(d/pushes, "writes_"+k+"/push")
		all += d
		if strings.HasPrefix(k, "imagerepositories") || strings.HasPrefix(k, "imagepolicies") {
			path += d
		}
	}
	b.ReportMetric(all/pushes, "apiserver_writes/push")
	b.ReportMetric(path/pushes, "path_writes/push")
	cpu := cpuSeconds(b, s)
	for k, v := range cpu {
		b.ReportMetric((v-cpuBefore[k])*1000/pushes, k+"_cpu_ms/push")
	}
	for k, v := range storeWaits(b, s) {
		b.ReportMetric((v.count-waitsBefore[k].count)/pushes, k+"_store_calls/push")
	}
	for _, c := range []string{stack.Scan, stack.Policy} {
		hwm, _, err := memory(s.PID(c))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(hwm)/1024, c+"_peak_MiB")
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// policyWatch records when each wave policy first shows a tag, as a watch of the apiserver sees
// it.
type policyWatch struct {
	tag  string
	seen chan map[int]time.Time
}

// watchPolicies starts watching the ImagePolicies of namespace default for tag; its wait returns
// when each wave policy showed it.
func watchPolicies(b *testing.B, s *stack.Stack, tag string) *policyWatch {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := s.Kube.Policies.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := s.Kube.Policies.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	pw := &policyWatch{tag: tag, seen: make(chan map[int]time.Time, 1)}
	go func() {
		defer cancel()
		defer w.Stop()
		seen := map[int]time.Time{}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			p, ok := ev.Object.(*imagev1.ImagePolicy)
			if !ok || p.Status.LatestRef == nil || p.Status.LatestRef.Tag != tag {
				continue
			}
			r, ok := waveIndex(p.Name)
			if _, was := seen[r]; ok && !was {
				seen[r] = time.Now()
			}
			if len(seen) == waveRepos {
				break
			}
		}
		pw.seen <- seen
	}()
	b.Cleanup(cancel)
	return pw
}

// wait returns when each wave policy first showed the tag. It fails b when the watch ends
// before they all did, or within passes first.
func (pw *policyWatch) wait(b *testing.B, within time.Duration) map[int]time.Time {
	b.Helper()
	select {
	case seen := <-pw.seen:
		if len(seen) < waveRepos {
			b.Fatalf("the watch ended with %d of %d ImagePolicies at %s", len(seen), waveRepos, pw.tag)
		}
		return seen
	case <-time.After(within):
		b.Fatalf("not every ImagePolicy reached %s within %s", pw.tag, within)
		return nil
	}
}

// waveIndex is r of the policy wave-<r>.
func waveIndex(policy string) (int, bool) {
	s, ok := strings.CutPrefix(policy, "wave-")
	if !ok {
		return 0, false
	}
	r, err := strconv.Atoi(s)
	return r, err == nil && r >= 0 && r < waveRepos
}

// cpuSeconds returns the CPU seconds used so far by the apiserver (its own
// process_cpu_seconds_total) and by the scan and policy functions and the cron reconciler (utime
// and stime of /proc/<pid>/stat), keyed apiserver, scan, policy and cron.
func cpuSeconds(b *testing.B, s *stack.Stack) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	raw, err := clientset.For(s.Env).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading the apiserver's metrics: %v", err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			if out["apiserver"], err = strconv.ParseFloat(v, 64); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
		if s.PID(c) == 0 {
			// Down: BenchmarkPushToLatest runs the cron as fresh --once processes (cronJob),
			// whose CPU it counts itself.
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.PID(c)))
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command, which is in parentheses and may hold spaces: utime and
		// stime are the 12th and 13th, in clock ticks (100 a second on Linux).
		_, rest, _ := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		out[c] = (utime + stime) / 100
	}
	return out
}
