package stack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

const coldManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: cold
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: cold
spec:
  imageRepositoryRef:
    name: cold
  policy:
    semver:
      range: ^1.x
`

// BenchmarkColdStart stops the stack's process of each function in turn and starts new ones in
// its place, with the same binary, environment and port, measuring from exec to the first
// answers: ready_ms to the first 200 of /healthz, first_ms to the first real request served
// after it (scan: a registry webhook answered 202 after matching and annotating the
// ImageRepository; policy: a TagsChanged CloudEvent answered 202 after evaluating the
// repository's ImagePolicy from the tag store). ns/op is first_ms; the process is stopped with
// SIGTERM outside the timer. The binary is in the page cache, as on a node that ran it before.
func BenchmarkColdStart(b *testing.B) {
	ctx := context.Background()
	s := start(b, stack.Options{CronEvery: time.Hour})
	reg := testenv.NewRegistry(b)
	image := reg.Image("cold/app")
	reg.Push(b, "cold/app", "1.0.0")
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(coldManifests, image))); err != nil {
		b.Fatal(err)
	}
	hook(b, s, image, "1.0.0", "cold-warmup")
	waitForPolicy(b, s, "cold", "1.0.0")
	logs := filepath.Join(b.TempDir(), "coldstart.log")

	b.Run("scan", func(b *testing.B) {
		coldStarts(b, s, stack.Scan, logs, func(url string, i int) error {
			body := fmt.Sprintf(`{"events":[{"id":"cold-%d","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"cold/app","tag":"1.0.0"},"request":{"host":%q}}]}`,
				i, reg.Host())
			req, err := http.NewRequest(http.MethodPost, url+"/hook/distribution/default", bytes.NewBufferString(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
			req.Header.Set("Authorization", "Bearer "+s.Token)
			return expect(req, http.StatusAccepted)
		})
	})
	// The event carries a token for the policy function's audience, as the Broker's does; a new
	// process reviews it once (TokenReview), part of its first answer as in a cluster.
	token, err := s.SenderToken(ctx, stack.PolicyAudience)
	if err != nil {
		b.Fatal(err)
	}
	tokenFile := filepath.Join(b.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("policy", func(b *testing.B) {
		coldStarts(b, s, stack.Policy, logs, func(url string, _ int) error {
			sender, err := events.NewSender(url, events.SourceScan, freshClient(), events.WithTokenFile(tokenFile))
			if err != nil {
				return err
			}
			return sender.Send(ctx, events.TypeTagsChanged, "default/cold",
				events.TagsChanged{Namespace: "default", Name: "cold"})
		})
	})
}

// coldStarts runs b.N cold starts of component c (stack.Scan or stack.Policy) in place of the
// stack's process, calling first with the URL it serves once it answers /healthz. The stack's
// process is started again at the end.
func coldStarts(b *testing.B, s *stack.Stack, c, logPath string, first func(url string, i int) error) {
	url := map[string]string{stack.Scan: s.ScanURL, stack.Policy: s.PolicyURL}[c]
	if err := s.Kill(c, syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Restart(context.Background(), c); err != nil {
			b.Error(err)
		}
	}()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	probe := freshClient()
	// The process of the iteration under way, which a failed wait leaves running.
	var running *exec.Cmd
	defer func() {
		if running != nil && running.ProcessState == nil {
			_ = running.Process.Kill()
			_ = running.Wait()
		}
	}()
	var ready, served []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		cmd, err := s.Command(c)
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		b.StartTimer()
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		running = cmd
		// Checks every millisecond: the resolution of the measured start-up.
		testenv.EventuallyEvery(b, 30*time.Second, time.Millisecond, func() error {
			resp, err := probe.Get(url + "/healthz")
			if err != nil {
				return fmt.Errorf("%s does not answer /healthz: %w; log %s", c, err, logPath)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: /healthz answered %s; log %s", c, resp.Status, logPath)
			}
			return nil
		})
		ready = append(ready, time.Since(start))
		err = first(url, i)
		served = append(served, time.Since(start))
		b.StopTimer()
		if err != nil {
			cmd.Process.Kill()
			b.Fatalf("%s: first request: %v; log %s", c, err, logPath)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("%s did not stop cleanly: %v; log %s", c, err, logPath)
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportMs(b, "ready", ready)
	reportMs(b, "first", served)
}

// reportMs reports the p50 and the maximum of d in milliseconds.
func reportMs(b *testing.B, name string, d []time.Duration) {
	slices.Sort(d)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(d[len(d)/2]), name+"_p50_ms")
	b.ReportMetric(ms(d[len(d)-1]), name+"_max_ms")
}

// freshClient returns an HTTP client that opens a new connection for every request, so that no
// request goes to a connection of a process that has exited.
func freshClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// expect sends req and requires the status want.
func expect(req *http.Request, want int) error {
	resp, err := freshClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		var msg bytes.Buffer
		msg.ReadFrom(resp.Body)
		return errors.New(strings.TrimSpace(fmt.Sprintf("answered %d, want %d: %s", resp.StatusCode, want, msg.String())))
	}
	return nil
}
