package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

const burstManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: burst-%[2]d
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: burst-%[2]d
spec:
  imageRepositoryRef:
    name: burst-%[2]d
  policy:
    semver:
      range: '>=1.0.0'
`

// BenchmarkBurstRSS sends the scan function, as a separate process in the whole stack, a burst
// of 1,000 registry webhook deliveries from 32 concurrent senders: 10 repositories of an
// in-process registry, 100 new tags each, one delivery per tag with its own id. The scan
// function annotates, confirms and stores the tags and sends TagsChanged events to the policy
// function, which evaluates one semver ImagePolicy per repository. An iteration ends when every
// ImagePolicy shows its repository's greatest new tag; ns/op is that time, all_answered_s the
// time until every delivery was answered. Both functions are restarted before each iteration,
// and their peak resident set sizes (VmHWM of /proc/<pid>/status) are read a second after it,
// when the tag store has been closed; the metrics are the largest over the iterations. The
// scan function's webhook rate limit is lifted, so that all 1,000 deliveries are processed
// instead of most being refused with 429; its registry client keeps its default of 10 requests
// a second per host, which bounds the iteration to about 100 s (one HEAD per pushed tag).
func BenchmarkBurstRSS(b *testing.B) {
	const repos, perRepo, senders = 10, 100, 32
	ctx := context.Background()
	s := start(b, stack.Options{CronEvery: time.Hour,
		Env: map[string][]string{stack.Scan: {"REFLECTOR_WEBHOOK_RATE=1000000", "REFLECTOR_WEBHOOK_BURST=1000"}}})
	reg := testenv.NewRegistry(b)
	repo := func(r int) string { return fmt.Sprintf("burst/app-%d", r) }
	for r := range repos {
		reg.Push(b, repo(r), "1.0.0")
		if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(burstManifests, reg.Image(repo(r)), r))); err != nil {
			b.Fatal(err)
		}
		hook(b, s, reg.Image(repo(r)), "1.0.0", fmt.Sprintf("burst-warmup-%d", r))
	}
	for r := range repos {
		waitForPolicy(b, s, fmt.Sprintf("burst-%d", r), "1.0.0")
	}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	var scanPeak, policyPeak, scanAfter, policyAfter int64
	var requests, refused int
	var answered time.Duration
	b.ResetTimer()
	for it := range b.N {
		b.StopTimer()
		for _, c := range []string{stack.Scan, stack.Policy} {
			if err := s.Kill(c, syscall.SIGTERM); err != nil {
				b.Fatal(err)
			}
			if err := s.Restart(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		tag := func(k int) string { return fmt.Sprintf("1.%d.0", it*perRepo+k+1) }
		for r := range repos {
			tags := make([]string, perRepo)
			for k := range tags {
				tags[k] = tag(k)
			}
			reg.Push(b, repo(r), tags...)
		}
		before := reg.RequestCount()
		work := make(chan int)
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		b.StartTimer()
		start := time.Now()
		for range senders {
			wg.Go(func() {
				for d := range work {
					r, k := d%repos, d/repos
					body := fmt.Sprintf(`{"events":[{"id":"burst-%d-%d","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":%q,"tag":%q},"request":{"host":%q}}]}`,
						it, d, repo(r), tag(k), reg.Host())
					req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/distribution/default", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
					req.Header.Set("Authorization", "Bearer "+s.Token)
					code := 0
					if resp, err := client.Do(req); err == nil {
						code = resp.StatusCode
						resp.Body.Close()
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			})
		}
		for d := range repos * perRepo {
			work <- d
		}
		close(work)
		wg.Wait()
		answered += time.Since(start)
		for r := range repos {
			name := fmt.Sprintf("burst-%d", r)
			testenv.Eventually(b, 2*time.Minute, func() error {
				p, err := s.Kube.Policies.Get(ctx, "default", name)
				if err != nil {
					return err
				}
				if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != tag(perRepo-1) {
					return fmt.Errorf("policy %s has not reached %s (answers %v); logs in %s", name, tag(perRepo-1), codes, s.Log(stack.Scan))
				}
				return nil
			})
		}
		b.StopTimer()
		// Scans that the burst started may still be reading from the registry.
		settle(b, func() float64 { return float64(reg.RequestCount()) })
		requests += reg.RequestCount() - before
		refused += repos*perRepo - codes[http.StatusAccepted]
		for _, m := range []struct {
			c           string
			peak, after *int64
		}{{stack.Scan, &scanPeak, &scanAfter}, {stack.Policy, &policyPeak, &policyAfter}} {
			hwm, rss, err := memory(s.PID(m.c))
			if err != nil {
				b.Fatal(err)
			}
			*m.peak = max(*m.peak, hwm)
			*m.after = max(*m.after, rss)
		}
		b.StartTimer()
	}
	b.StopTimer()
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	b.ReportMetric(mib(scanPeak), "scan_peak_MiB")
	b.ReportMetric(mib(policyPeak), "policy_peak_MiB")
	b.ReportMetric(mib(scanAfter), "scan_rss_after_MiB")
	b.ReportMetric(mib(policyAfter), "policy_rss_after_MiB")
	b.ReportMetric(answered.Seconds()/float64(b.N), "all_answered_s")
	b.ReportMetric(float64(requests)/float64(b.N), "registry_req/burst")
	b.ReportMetric(float64(refused)/float64(b.N), "not_202/burst")
}

// memory returns the peak and the current resident set size of a process in KiB: VmHWM and
// VmRSS of /proc/<pid>/status.
func memory(pid int) (hwm, rss int64, err error) {
	if pid == 0 {
		return 0, 0, fmt.Errorf("the process is not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmHWM" && key != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, key, err)
		}
		if key == "VmHWM" {
			hwm = kb
		} else {
			rss = kb
		}
	}
	return hwm, rss, nil
}

// rollup returns fields of /proc/<pid>/smaps_rollup in KiB: Rss, Pss, Anonymous,
// Private_Dirty and the rest.
func rollup(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return nil, err
	}
	fields := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			continue
		}
		fields[key] = kb
	}
	return fields, nil
}
