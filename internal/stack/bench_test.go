package stack_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
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

// BenchmarkPushToLatest measures, over the whole system as separate processes, the time from a push
// to the ImagePolicy's new latestRef, as a watch of the ImagePolicies delivers it (-seen): once
// through docker-registry's own notifications (registry_p50_ms, registry_p99_ms, which include the
// registry's notification delay) and once from the sending of a webhook to the scan function for a
// registry that notifies nobody else (webhook_p50_ms, webhook_p99_ms). b.N counts pushes of each
// kind. The sub-benchmarks differ in how many tags each repository holds before the measured pushes
// (seed tags that no policy selects) and in the scan function's registry rate limit
// (REFLECTOR_REGISTRY_RATE): lifted ("none"), the path itself is measured; at the default of 10
// requests a second per host, the pushes, which follow each other at about that rate, also wait for
// the limit. Each starts its own stack once, which later runs of the same sub-benchmark reuse, and
// stops it when the sub-benchmark is done. At 100,000 tags only the lifted limit is run: the
// size is there to show what a push costs the functions and the store (storeBytes, vlogBytes).
func BenchmarkPushToLatest(b *testing.B) {
	for _, tags := range []int{100, 10_000, 100_000} {
		for _, limit := range []string{"none", "10"} {
			if tags > 10_000 && limit != "none" {
				continue
			}
			var pb *pushBench
			b.Run(fmt.Sprintf("tags=%d/registry_rate=%s", tags, limit), func(sub *testing.B) {
				if pb == nil {
					pb = newPushBench(b, tags, limit)
				}
				pb.run(sub)
			})
			// An idle stack keeps its cron pass and interval scans: stopped, it takes no CPU from
			// the sub-benchmarks after it.
			if pb != nil {
				_ = pb.s.Stop()
			}
		}
	}
}

// pushBench is one stack with two repositories of tags tags each: app in docker-registry, which
// notifies the scan function, and direct in an in-process registry, which notifies nobody.
type pushBench struct {
	s           *stack.Stack
	image       string
	direct      *testenv.Registry
	directImage string
	pushed      int
}

// newPushBench starts the stack with the scan function's registry rate limit at limit, "none"
// for none.
func newPushBench(b *testing.B, tags int, limit string) *pushBench {
	ctx := context.Background()
	// The seed's notifications must not queue up in docker-registry behind the webhook's rate
	// limit, ahead of the measured pushes'.
	var extra []string
	if *functionEnv != "" {
		extra = strings.Split(*functionEnv, ",")
	}
	s := start(b, stack.Options{CronEvery: time.Minute, NotifyBackoff: 200 * time.Millisecond,
		Env: map[string][]string{stack.Scan: append([]string{"REFLECTOR_WEBHOOK_RATE=1000000", "REFLECTOR_WEBHOOK_BURST=1000",
			registryRate(limit)}, extra...), stack.Policy: extra}})
	pb := &pushBench{s: s, image: s.Registry + "/bench/app"}
	// Each repository holds tags tags: the seed and the two of the warm-up. The seed tags go in
	// before the ImageRepositories exist: their notifications match nothing, and the first scan
	// lists them all.
	warm := []struct{ policy, tag string }{{"stable", "1.0.0"}, {"preview", "1.3.0-rc.0"}}
	seed := testenv.RegistryTags("seed-", tags-len(warm))
	if tags > 10_000 {
		seedTags(b, s, "bench/app", seed)
	} else if err := pushTags(ctx, pb.image, seed); err != nil {
		b.Fatal(err)
	}
	waitNotified(b, s)
	// An interval of an hour, as direct's: the interval scans that e2e's 5 s would add during the
	// pushes are listings, whose cost grows with the repository and is not a push's.
	benchManifests := strings.Replace(manifests, "interval: 5s", "interval: 1h", 1)
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(benchManifests, pb.image))); err != nil {
		b.Fatal(err)
	}
	// Every policy has a latest image before the measured pushes: a policy that has none yet,
	// such as preview before its first release candidate, is evaluated from the store at every
	// push, which the pushes would measure as the scan function's wait for the store.
	for _, p := range warm {
		if _, err := stack.Push(pb.image + ":" + p.tag); err != nil {
			b.Fatal(err)
		}
		waitForPolicy(b, s, p.policy, p.tag)
	}

	pb.direct = testenv.NewRegistry(b)
	pb.directImage = pb.direct.Image("bench/direct")
	pb.direct.Push(b, "bench/direct", append([]string{warm[0].tag, warm[1].tag}, seed...)...)
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(directManifests, pb.directImage))); err != nil {
		b.Fatal(err)
	}
	hook(b, s, pb.directImage, "1.0.0", "warmup")
	waitForPolicy(b, s, "direct", "1.0.0")
	// A repository's status may be written after its policies': the scan announces its tags first.
	for _, name := range []string{"app", "direct"} {
		testenv.Eventually(b, 30*time.Second, func() error {
			r, err := s.Kube.Repositories.Get(ctx, "default", name)
			if err != nil {
				return err
			}
			if r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != tags {
				return fmt.Errorf("ImageRepository %s holds %v, want %d tags", name, r.Status.LastScanResult, tags)
			}
			return nil
		})
	}
	// In production the cron reconciler is a CronJob (knative/cron.yaml): each pass is a new
	// process that exits when the pass is done. The stack's loop holds its memory between passes,
	// which no deployment does: run measures the cron as deployed (cronJob) instead.
	if err := s.Kill(stack.Cron, syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	return pb
}

// profileAPIServer starts a 15 s CPU profile of the stack's apiserver that goes to the file out,
// and returns a function that waits for it; with out empty it does nothing.
func profileAPIServer(b *testing.B, s *stack.Stack, out string) (wait func()) {
	b.Helper()
	if out == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := clientset.For(s.Env).Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", "15").DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(out, raw, 0o644)
		}
		if err != nil {
			b.Errorf("profiling the apiserver: %v", err)
		}
	}()
	return func() { <-done }
}

// collections returns the garbage collections each function has run so far (the count of its
// go_gc_duration_seconds), keyed scan and policy.
func collections(b *testing.B, s *stack.Stack) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	for _, c := range []string{stack.Scan, stack.Policy} {
		for _, m := range testenv.Scrape(b, s.Metrics[c])["go_gc_duration_seconds"].GetMetric() {
			out[c] += float64(m.GetSummary().GetSampleCount())
		}
	}
	return out
}

// registryRate is the functions' setting of REFLECTOR_REGISTRY_RATE for a benchmark's limit:
// requests a second per registry host, "none" for no limit.
func registryRate(limit string) string {
	if limit == "none" {
		limit = "0"
	}
	return "REFLECTOR_REGISTRY_RATE=" + limit
}

// waitNotified waits until docker-registry has delivered its notifications: until the scan
// function's count of webhook deliveries has stood still for three seconds.
func waitNotified(b *testing.B, s *stack.Stack) {
	b.Helper()
	settleFor(b, 3*time.Second, 10*time.Minute, func() float64 {
		total := 0.0
		for _, series := range testenv.Scrape(b, s.Metrics[stack.Scan])["reflector_webhook_requests_total"].GetMetric() {
			total += series.GetCounter().GetValue()
		}
		return total
	})
}

// seedTags tags the image of one push to docker-registry's repository repo with every tag of
// tags by writing the tag links into the registry's storage, as docker-registry's own tagging
// writes them: tens of thousands of tags in seconds, where pushing them takes many minutes. The
// registry sends no notifications for them, which the seed's pushes only sent to be ignored.
func seedTags(b *testing.B, s *stack.Stack, repo string, tags []string) {
	b.Helper()
	if _, err := stack.Push(s.Registry + "/" + repo + ":" + tags[0]); err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(s.StoreDir()), "registry", "data", "docker", "registry", "v2",
		"repositories", repo, "_manifests", "tags")
	link, err := os.ReadFile(filepath.Join(dir, tags[0], "current", "link"))
	if err != nil {
		b.Fatal(err)
	}
	algo, hex, ok := strings.Cut(string(link), ":")
	if !ok {
		b.Fatalf("tag link %q", link)
	}
	var g errgroup.Group
	g.SetLimit(8)
	for _, tag := range tags[1:] {
		g.Go(func() error {
			for _, d := range []string{filepath.Join(dir, tag, "current"), filepath.Join(dir, tag, "index", algo, hex)} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, "link"), link, 0o644); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// storeBytes returns what the scan function and the cron reconciler, the store's writers, have
// written to it (reflector_store_written_bytes_total), keyed by cause: listing, push or
// compaction.
func storeBytes(b *testing.B, s *stack.Stack) map[string]float64 {
	b.Helper()
	out := map[string]float64{"listing": 0, "push": 0, "compaction": 0}
	for _, c := range []string{stack.Scan, stack.Cron} {
		if s.PID(c) == 0 {
			// The cron as a CronJob runs --once, which serves no metrics; what it writes is
			// the deletion of gone repositories' entries, none here.
			continue
		}
		for _, m := range testenv.Scrape(b, s.Metrics[c])["reflector_store_written_bytes_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cause" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// vlogBytes returns the bytes that the store's value-log files take on disk: Badger maps an open
// file at twice its configured size and fills it as it writes, so the allocated blocks, not the
// size, are what it wrote.
func vlogBytes(b *testing.B, s *stack.Stack) float64 {
	b.Helper()
	files, err := filepath.Glob(filepath.Join(s.StoreDir(), "*.vlog"))
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			if os.IsNotExist(err) {
				continue
			}
			b.Fatal(err)
		}
		total += float64(st.Blocks) * 512
	}
	return total
}

// pushTags pushes one image under every tag of tags to image's repository, eight at a time.
func pushTags(ctx context.Context, image string, tags []string) error {
	img, err := random.Image(256, 1)
	if err != nil {
		return err
	}
	pusher, err := remote.NewPusher()
	if err != nil {
		return err
	}
	var g errgroup.Group
	g.SetLimit(8)
	for _, tag := range tags {
		g.Go(func() error {
			ref, err := name.NewTag(image+":"+tag, name.Insecure)
			if err != nil {
				return err
			}
			return pusher.Push(ctx, ref, img)
		})
	}
	return g.Wait()
}

// seenBy is how BenchmarkPushToLatest sees a latestRef: "watch", a watch of the ImagePolicies, as
// Flux's image-automation-controller sees it, or "poll", a read every 5 ms, which sees a write a
// median half its period and one read late and adds 200 reads a second to the apiserver's load.
var seenBy = flag.String("seen", "watch", "how BenchmarkPushToLatest sees latestRef: watch or poll")

// pushEvery paces BenchmarkPushToLatest: each iteration (a push of each kind) starts at least
// this long after the one before. Unpaced, the pipeline's registry pushes ask docker-registry
// more often than the default limit's 10 requests a second, and every push waits for its token;
// paced below the limit, the benchmark measures the path at the default limit.
var pushEvery = flag.Duration("push-every", 0, "start BenchmarkPushToLatest's iterations at least this far apart (0: unpaced)")

// functionEnv adds settings to the environment of BenchmarkPushToLatest's scan and policy
// functions, after the stack's own, which they override: the collector's (GOGC, GOMEMLIMIT,
// REFLECTOR_STEADY_GOGC), to measure what each costs and saves.
var functionEnv = flag.String("function-env", "", "comma-separated KEY=VALUE settings for BenchmarkPushToLatest's scan and policy functions, after the stack's")

// apiserverProfile, when set, is the file into which BenchmarkPushToLatest writes a CPU profile
// of the apiserver (its /debug/pprof/profile) over the first 15 s of its pushes.
var apiserverProfile = flag.String("apiserver-profile", "", "write a 15 s CPU profile of the apiserver during BenchmarkPushToLatest's pushes to this file")

func (pb *pushBench) run(b *testing.B) {
	s := pb.s
	var viaRegistry, viaWebhook []time.Duration
	var traces, registryPushes []pushTrace
	seen := func(name, tag string, start time.Time) time.Duration {
		waitForPolicy(b, s, name, tag)
		return time.Since(start)
	}
	switch *seenBy {
	case "poll":
	case "watch":
		pw := watchLatest(b, s)
		seen = func(name, tag string, start time.Time) time.Duration {
			return pw.wait(b, name, tag).Sub(start)
		}
	default:
		b.Fatalf("-seen=%s: want poll or watch", *seenBy)
	}
	writesBefore := apiserverWrites(b, s)
	waitsBefore := storeWaits(b, s)
	cpuBefore, gcBefore := cpuSeconds(b, s), collections(b, s)
	storeBefore, vlogBefore := storeBytes(b, s), vlogBytes(b, s)
	profiled := profileAPIServer(b, s, *apiserverProfile)
	requestsBefore, notFoundBefore := registryRequests(b, s)
	runStart := time.Now()
	sampled := sampleMemory(s, time.Second)
	passes := cronJob(b, s, time.Minute)
	b.ResetTimer()
	var began time.Time
	for range b.N {
		// The pace is kept outside the measured intervals: each is from a push to its latestRef.
		time.Sleep(*pushEvery - time.Since(began))
		began = time.Now()
		pb.pushed++
		tag := fmt.Sprintf("1.%d.0", pb.pushed)
		if _, err := stack.Push(pb.image + ":" + tag); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		took := seen("stable", tag, start)
		viaRegistry = append(viaRegistry, took)
		registryPushes = append(registryPushes, pushTrace{sent: start, seen: took, id: tag})

		pb.direct.Push(b, "bench/direct", tag)
		start = time.Now()
		id := hook(b, s, pb.directImage, tag, fmt.Sprintf("bench-%d", pb.pushed))
		answered := time.Since(start)
		took = seen("direct", tag, start)
		viaWebhook = append(viaWebhook, took)
		traces = append(traces, pushTrace{sent: start, answered: answered, seen: took, id: id})
	}
	b.StopTimer()
	pushing := b.Elapsed()
	means := sampled()
	cron := passes()
	profiled()
	// The writes of the measured pushes, of either kind: the annotation, the statuses and the
	// Events that client-go's recorder sends in the background, which may still be on their way.
	settle(b, func() float64 {
		n := 0.0
		for _, v := range apiserverWrites(b, s) {
			n += v
		}
		return n
	})
	pushes := float64(2 * b.N)
	// What the store wrote for the pushes (the scan function's deltas and their compactions, and
	// any listing's list), and how much its value log grew.
	for k, v := range storeBytes(b, s) {
		b.ReportMetric((v-storeBefore[k])/pushes, "store_"+k+"_B/push")
	}
	// A listing writes the whole list: its share of the bytes is not a push's.
	listings := 0
	readLog(b, s.Log(stack.Scan), func(line map[string]any) {
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(line["time"]))
		if line["msg"] == "scan" && line["incremental"] == false && err == nil && at.After(runStart) {
			listings++
			b.Logf("a listing during the pushes, %s after they began: %v %v", at.Sub(runStart), line["name"], line["listing"])
		}
	})
	b.ReportMetric(float64(listings)/pushes, "scan_listings/push")
	vlog := vlogBytes(b, s) - vlogBefore
	b.ReportMetric(vlog/pushes, "vlog_B/push")
	b.ReportMetric(vlog/1024, "vlog_growth_KiB")
	for k, v := range cpuSeconds(b, s) {
		b.ReportMetric((v-cpuBefore[k])*1000/pushes, k+"_cpu_ms/push")
	}
	for k, v := range collections(b, s) {
		b.ReportMetric((v-gcBefore[k])/pushes, k+"_gc/push")
	}
	writes := apiserverWrites(b, s)
	total := 0.0
	for k, v := range writes {
		if d := v - writesBefore[k]; d > 0 {
			b.ReportMetric(d/pushes, "writes_"+k+"/push")
			total += d
		}
	}
	b.ReportMetric(total/pushes, "apiserver_writes/push")
	for k, v := range storeWaits(b, s) {
		w := waitsBefore[k]
		n := v.count - w.count
		// Each store call waits once: the policy function makes none for a push that its
		// policies advance by the scan's delta.
		b.ReportMetric(n/pushes, k+"_store_calls/push")
		if n > 0 {
			b.ReportMetric((v.sum-w.sum)/n*1000, k+"_store_wait_ms")
		}
	}
	// The cron reconciler as deployed: a --once process a minute. Its peak is that of the largest
	// pass; its means are over the whole run, zero while no pass runs, and are what the summed
	// means count of it.
	elapsed := time.Since(runStart).Seconds()
	b.ReportMetric(float64(cron.passes), "cron_passes")
	if cron.passes > 0 {
		b.ReportMetric(cron.seconds*1000/float64(cron.passes), "cron_pass_ms")
	}
	b.ReportMetric(cron.peakMiB, "cron_pass_peak_MiB")
	b.ReportMetric(cron.rssMiBs/elapsed, "cron_rss_mean_MiB")
	b.ReportMetric(cron.anonMiBs/elapsed, "cron_anon_mean_MiB")
	b.ReportMetric(cron.cpuSeconds*1000/pushes, "cron_cpu_ms/push")
	means["functions_rss"] += cron.rssMiBs / elapsed
	means["functions_anon"] += cron.anonMiBs / elapsed
	// Peak and current RSS of each function, and the current RSS of the two summed: with
	// -push-every 1s, what the functions hold while one push a second flows (two, one of each kind).
	functionsRSS, functionsAnon, functionsPss := 0.0, 0.0, 0.0
	for _, c := range []string{stack.Scan, stack.Policy} {
		hwm, rss, err := memory(s.PID(c))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(hwm)/1024, c+"_peak_MiB")
		b.ReportMetric(float64(rss)/1024, c+"_rss_MiB")
		functionsRSS += float64(rss) / 1024
		// Of the RSS: anonymous memory (the Go runtime's, Badger's arenas) and file-backed pages
		// (the binary's, Badger's mapped tables and value log), which the kernel may drop; and the
		// proportional set size, which splits pages shared with other processes.
		if r, err := rollup(s.PID(c)); err == nil {
			b.ReportMetric(float64(r["Anonymous"])/1024, c+"_anon_MiB")
			b.ReportMetric(float64(r["Rss"]-r["Anonymous"])/1024, c+"_file_MiB")
			b.ReportMetric(float64(r["Pss"])/1024, c+"_pss_MiB")
			functionsAnon += float64(r["Anonymous"]) / 1024
			functionsPss += float64(r["Pss"]) / 1024
		}
		// Of the RSS: the Go heap in use, and all that the Go runtime holds from the system (heap,
		// stacks, its own structures); the rest is the binary's pages and Badger's mappings.
		m := testenv.Scrape(b, s.Metrics[c])
		heap, _ := m.Value("go_memstats_heap_inuse_bytes", nil)
		sys, _ := m.Value("go_memstats_sys_bytes", nil)
		b.ReportMetric(heap/(1<<20), c+"_heap_MiB")
		b.ReportMetric(sys/(1<<20), c+"_gosys_MiB")
	}
	b.ReportMetric(functionsRSS, "functions_rss_MiB")
	b.ReportMetric(functionsAnon, "functions_anon_MiB")
	b.ReportMetric(functionsPss, "functions_pss_MiB")
	// The same, averaged over the pushes: a reading at one moment moves by several MiB with
	// where each Go heap is between two collections.
	for k, v := range means {
		b.ReportMetric(v, k+"_mean_MiB")
	}
	// What the scan function asked docker-registry: at the default limit these requests share
	// its bucket of 10 a second, and a confirmation's HEAD that comes before docker-registry
	// wrote the tag is answered 404 and asked again.
	all, notFound := registryRequests(b, s)
	all, notFound = all-requestsBefore, notFound-notFoundBefore
	b.ReportMetric(all/float64(b.N), "registry_requests/registry_push")
	b.ReportMetric(notFound/float64(b.N), "registry_404/registry_push")
	b.ReportMetric(all/pushing.Seconds(), "registry_requests/s")
	reportPercentiles(b, "registry", viaRegistry)
	reportPercentiles(b, "webhook", viaWebhook)
	reportSteps(b, s, traces)
	logSlowRegistry(b, s, registryPushes)
}

// sampleMemory reads, every period until the returned function is called, the RSS and its
// anonymous part of the scan and policy functions, and returns the means in MiB:
// <component>_rss, <component>_anon, and functions_rss and functions_anon of the two summed. A
// reading that fails (a process restarting) is left out.
func sampleMemory(s *stack.Stack, period time.Duration) (stop func() map[string]float64) {
	done := make(chan struct{})
	result := make(chan map[string]float64)
	go func() {
		sums, counts := map[string]float64{}, map[string]float64{}
		add := func(k string, kb int64) {
			sums[k] += float64(kb) / 1024
			counts[k]++
		}
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			var rss, anon int64
			whole := true
			for _, c := range []string{stack.Scan, stack.Policy} {
				r, err := rollup(s.PID(c))
				if err != nil || r["Rss"] == 0 {
					whole = false
					continue
				}
				add(c+"_rss", r["Rss"])
				add(c+"_anon", r["Anonymous"])
				rss, anon = rss+r["Rss"], anon+r["Anonymous"]
			}
			if whole {
				add("functions_rss", rss)
				add("functions_anon", anon)
			}
			select {
			case <-done:
				means := map[string]float64{}
				for k, v := range sums {
					means[k] = v / counts[k]
				}
				result <- means
				return
			case <-t.C:
			}
		}
	}()
	return func() map[string]float64 {
		close(done)
		return <-result
	}
}

// slowPushes, when set, is the file to which BenchmarkPushToLatest appends what the functions
// logged during its slowest registry pushes (logSlowRegistry); a benchmark's own log keeps only
// its first ten lines.
var slowPushes = flag.String("slow-pushes", "", "append the functions' log lines during BenchmarkPushToLatest's slowest registry pushes to this file")

// logSlowRegistry logs the slowest pushes through docker-registry's notifications (those above
// their p99 and at least the slowest one; their id is the pushed tag) and, with -slow-pushes,
// writes what the scan and policy functions logged from the end of each until latestRef was
// seen: these pushes carry no trace id the benchmark knows, so their lines are found by time.
func logSlowRegistry(b *testing.B, s *stack.Stack, pushes []pushTrace) {
	b.Helper()
	slow := slices.SortedFunc(slices.Values(pushes), func(x, y pushTrace) int { return cmp.Compare(y.seen, x.seen) })
	slow = slow[:max(1, len(slow)/100)]
	for _, p := range slow {
		b.Logf("slow registry push of %s: seen %.1f ms after the push", p.id, ms(p.seen))
	}
	if *slowPushes == "" {
		return
	}
	type logged struct {
		at   time.Time
		text string
	}
	var out strings.Builder
	for _, p := range slow {
		var lines []logged
		for _, c := range []string{stack.Scan, stack.Policy} {
			readLog(b, s.Log(c), func(line map[string]any) {
				at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(line["time"]))
				if err != nil || at.Before(p.sent) || at.After(p.sent.Add(p.seen)) {
					return
				}
				text := fmt.Sprintf("%.1f %s %v %v", ms(at.Sub(p.sent)), c, line["msg"], line["name"])
				for _, k := range []string{"duration", "outcome", "skipped", "type", "steps", "error"} {
					if v, ok := line[k]; ok {
						if d, isNum := v.(float64); isNum && k == "duration" {
							v = fmt.Sprintf("%.1fms", d/1e6)
						}
						text += fmt.Sprintf(" %s=%v", k, v)
					}
				}
				lines = append(lines, logged{at, text})
			})
		}
		slices.SortFunc(lines, func(x, y logged) int { return x.at.Compare(y.at) })
		fmt.Fprintf(&out, "%s: slow registry push of %s: seen %.1f ms after the push; the functions' lines (ms after the push):\n",
			b.Name(), p.id, ms(p.seen))
		for _, l := range lines {
			fmt.Fprintf(&out, "\t%s\n", l.text)
		}
	}
	f, err := os.OpenFile(*slowPushes, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = f.WriteString(out.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		b.Errorf("writing the slow pushes: %v", err)
	}
}

// reportPercentiles reports the median and the 99th percentile of d, in milliseconds, as
// <name>_p50_ms and <name>_p99_ms. It sorts d.
func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"_p50_ms")
	b.ReportMetric(float64(d[(len(d)*99)/100].Microseconds())/1000, name+"_p99_ms")
}

// pushTrace is one push of the webhook path: when its webhook was sent, how long its answer and
// its latestRef took to reach the benchmark, and its trace id.
type pushTrace struct {
	sent           time.Time
	answered, seen time.Duration
	id             string
}

// reportSteps reports, as step_<name>_ms, the median time from a webhook's sending at which
// each step on its way to latestRef ended, read from the log lines that the scan and policy
// functions write with the push's trace id: the answer (as the benchmark received it); the
// scan's start, its object read, its registry session, the stored list read, the pushed tag
// confirmed, its tags stored, its annotation patch returned, its status written (the scan's
// steps); the TagsChanged event's
// arrival at the policy function, the evaluation's start after the policies were listed, its
// repository read, the policy read again when the listing showed an older status, the policy
// advanced by the delta (or its tags read from the store), the ImagePolicy's status written (the
// evaluation's steps, each only when it happened); and latestRef seen by the benchmark (-seen).
func reportSteps(b *testing.B, s *stack.Stack, traces []pushTrace) {
	b.Helper()
	byID := map[string]map[string]time.Time{}
	for _, t := range traces {
		byID[t.id] = map[string]time.Time{}
	}
	at := func(line map[string]any, key string) (time.Time, bool) {
		ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(line["time"]))
		if err != nil {
			return time.Time{}, false
		}
		if key == "" {
			return ts, true
		}
		d, ok := line[key].(float64)
		return ts.Add(-time.Duration(d)), ok
	}
	readLog(b, s.Log(stack.Scan), func(line map[string]any) {
		steps, ok := line["steps"].(map[string]any)
		marks := byID[fmt.Sprint(line["trace_id"])]
		if line["msg"] != "scan" || !ok || marks == nil {
			return
		}
		began, ok := at(line, "duration")
		if !ok {
			return
		}
		marks["scan_start"] = began
		for step, d := range steps {
			if d, ok := d.(float64); ok {
				marks["scan_"+step] = began.Add(time.Duration(d))
			}
		}
		marks["scan_done"], _ = at(line, "")
	})
	readLog(b, s.Log(stack.Policy), func(line map[string]any) {
		marks := byID[fmt.Sprint(line["trace_id"])]
		if marks == nil {
			return
		}
		switch {
		case line["msg"] == "event handled":
			marks["event_arrived"], _ = at(line, "duration")
		case line["msg"] == "evaluated ImagePolicy" && line["name"] == "direct":
			began, _ := at(line, "duration")
			marks["evaluation_start"] = began
			marks["evaluated"], _ = at(line, "")
			steps, _ := line["steps"].(map[string]any)
			for step, d := range steps {
				if d, ok := d.(float64); ok {
					marks["evaluation_"+step] = began.Add(time.Duration(d))
				}
			}
		}
	})
	offsets := map[string][]time.Duration{}
	for _, t := range traces {
		offsets["answered"] = append(offsets["answered"], t.answered)
		offsets["seen"] = append(offsets["seen"], t.seen)
		for step, ts := range byID[t.id] {
			if !ts.IsZero() {
				offsets[step] = append(offsets[step], ts.Sub(t.sent))
			}
		}
	}
	for step, d := range offsets {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "step_"+step+"_ms")
		if len(d) < len(traces) {
			// A step that not every push took: how many did.
			b.ReportMetric(float64(len(d))/float64(len(traces)), "step_"+step+"/push")
		}
	}
	logSlowest(b, traces, byID)
}

// logSlowest logs the steps of the slowest pushes of traces, those above their p99 and at least
// the slowest one, in the order they ended: where a push that the median does not show spent
// its time.
func logSlowest(b *testing.B, traces []pushTrace, byID map[string]map[string]time.Time) {
	b.Helper()
	slow := slices.SortedFunc(slices.Values(traces), func(x, y pushTrace) int { return cmp.Compare(y.seen, x.seen) })
	slow = slow[:max(1, len(slow)/100)]
	for _, t := range slow {
		marks := byID[t.id]
		steps := slices.SortedFunc(maps.Keys(marks), func(x, y string) int { return marks[x].Compare(marks[y]) })
		var line strings.Builder
		fmt.Fprintf(&line, "slow webhook push %s: seen %.1f ms, answered %.1f ms", t.id, ms(t.seen), ms(t.answered))
		for _, step := range steps {
			fmt.Fprintf(&line, ", %s %.1f", step, ms(marks[step].Sub(t.sent)))
		}
		b.Log(line.String())
	}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// readLog calls each with every JSON line of the log at path.
func readLog(tb testing.TB, path string, each func(map[string]any)) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			each(line)
		}
	}
}

// hook sends the scan function a distribution notification of a push of image:tag (image is
// host/repository), authenticated with the stack's token, and returns the trace id of its
// answer.
func hook(b *testing.B, s *stack.Stack, image, tag, id string) string {
	b.Helper()
	host, repo, _ := strings.Cut(image, "/")
	body := fmt.Sprintf(`{"events":[{"id":%q,"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":%q,"tag":%q},"request":{"host":%q}}]}`,
		id, repo, tag, host)
	req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/distribution/default", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("webhook answered %d", resp.StatusCode)
	}
	var answer struct {
		TraceID string `json:"traceId"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		b.Fatalf("the webhook's answer: %v", err)
	}
	return answer.TraceID
}

// waitForPolicy waits until the ImagePolicy default/name resolves to tag, checking every 5 ms,
// the resolution of the latencies measured with it.
// latestWatch is a watch of the stack's ImagePolicies in namespace default that notes when
// each latestRef was first seen.
type latestWatch struct {
	seen chan seenRef
}

// seenRef is a policy's latestRef tag and when the watch delivered it.
type seenRef struct {
	name, tag string
	at        time.Time
}

// watchLatest starts a latestWatch that ends with the benchmark.
func watchLatest(b *testing.B, s *stack.Stack) *latestWatch {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	w, err := s.Kube.Policies.Watch(ctx, "default", metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pw := &latestWatch{seen: make(chan seenRef, 1024)}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			at := time.Now()
			p, ok := ev.Object.(*imagev1.ImagePolicy)
			if !ok || p.Status.LatestRef == nil {
				continue
			}
			select {
			case pw.seen <- seenRef{name: p.Name, tag: p.Status.LatestRef.Tag, at: at}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return pw
}

// wait returns when the watch delivered tag as name's latestRef, passing over what it delivered
// before.
func (pw *latestWatch) wait(b *testing.B, name, tag string) time.Time {
	b.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-pw.seen:
			if r.name == name && r.tag == tag {
				return r.at
			}
		case <-timeout:
			b.Fatalf("the watch did not deliver %s as the latestRef of %s", tag, name)
		}
	}
}

func waitForPolicy(b *testing.B, s *stack.Stack, name, tag string) {
	b.Helper()
	testenv.EventuallyEvery(b, 30*time.Second, 5*time.Millisecond, func() error {
		p, err := s.Kube.Policies.Get(context.Background(), "default", name)
		if err != nil {
			return err
		}
		if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != tag {
			return fmt.Errorf("policy %s has not reached %s: %+v", name, tag, p.Status.LatestRef)
		}
		return nil
	})
}

// settleQuiet is how long a count must stay unchanged for settle.
const settleQuiet = time.Second

// settle waits until count, of work that goes on in the background with nothing to say when it
// is done, has stayed the same for settleQuiet.
func settle(b *testing.B, count func() float64) {
	b.Helper()
	settleFor(b, settleQuiet, time.Minute, count)
}

// settleFor waits, for at most within, until count has stayed the same for quiet.
func settleFor(b *testing.B, quiet, within time.Duration, count func() float64) {
	b.Helper()
	last, since := count(), time.Now()
	testenv.Eventually(b, within, func() error {
		if n := count(); n != last {
			last, since = n, time.Now()
		}
		if still := time.Since(since); still < quiet {
			return fmt.Errorf("the count was %v, unchanged for only %s", last, still.Round(time.Millisecond))
		}
		return nil
	})
}

// apiserverWrites returns the apiserver's own count of the write requests it has served
// (apiserver_request_total of the verbs that write), by resource and subresource.
func apiserverWrites(b *testing.B, s *stack.Stack) map[string]float64 {
	b.Helper()
	raw, err := clientset.For(s.Env).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading the apiserver's metrics: %v", err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for kv := range strings.SplitSeq(labels, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				l[k] = strings.Trim(v, `"`)
			}
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE":
		default:
			continue
		}
		key := l["resource"]
		if l["subresource"] != "" {
			key += "_" + l["subresource"]
		}
		out[key] += n
	}
	return out
}

// waitSum is a histogram's sum and count.
type waitSum struct{ sum, count float64 }

// registryRequests returns the scan function's requests to the stack's docker-registry so far,
// and how many of them were answered 404.
func registryRequests(b *testing.B, s *stack.Stack) (all, notFound float64) {
	b.Helper()
	m := testenv.Scrape(b, s.Metrics[stack.Scan])
	all, _ = m.Value("reflector_registry_requests_total", map[string]string{"host": s.Registry})
	notFound, _ = m.Value("reflector_registry_requests_total", map[string]string{"host": s.Registry, "code": "404"})
	return all, notFound
}

// storeWaits returns how long the scan and policy functions have waited for the tag store
// (reflector_store_lock_wait_seconds), keyed scan and policy.
func storeWaits(b *testing.B, s *stack.Stack) map[string]waitSum {
	b.Helper()
	out := map[string]waitSum{}
	for _, c := range []string{stack.Scan, stack.Policy} {
		m := testenv.Scrape(b, s.Metrics[c])
		fam, ok := m["reflector_store_lock_wait_seconds"]
		if !ok {
			continue
		}
		var w waitSum
		for _, series := range fam.GetMetric() {
			if h := series.GetHistogram(); h != nil {
				w.sum += h.GetSampleSum()
				w.count += float64(h.GetSampleCount())
			}
		}
		out[c] = w
	}
	return out
}
