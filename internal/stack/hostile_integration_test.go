package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// hostileManifests are an ImageRepository of a hostile registry's image and an alphabetical
// ImagePolicy of it, under which any tag sorting after v2.0.0 would be selected.
const hostileManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: hostile
spec:
  image: %[1]s
  interval: 1h
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: hostile-alphabetical
spec:
  imageRepositoryRef:
    name: hostile
  policy:
    alphabetical:
      order: asc
`

// invalidTags are tags outside the distribution spec's grammar that sort after v2.0.0, so that
// an alphabetical policy would select them were they stored: 10 kB, a terminal escape, a
// right-to-left override, DEL, invalid UTF-8.
var invalidTags = []string{
	"z" + strings.Repeat("9", 10_000),
	"zz\x1b[31mred",
	"zz\u202e0.1v",
	"zz\x7f",
	"zz\xff\xfe",
}

// rawTagPage is a tags/list page of tags written byte for byte: json.Marshal would turn invalid
// UTF-8 into U+FFFD.
func rawTagPage(tags []string) string {
	var b strings.Builder
	b.WriteString(`{"name":"hostile/app","tags":[`)
	for i, tag := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(tag); j++ {
			if c := tag[j]; c < 0x20 || c == '"' || c == '\\' {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
	b.WriteString(`]}`)
	return b.String()
}

// residentSet returns the resident set of process pid and its peak, in bytes (memory).
func residentSet(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	hwm, now, err := memory(pid)
	if err != nil {
		t.Fatal(err)
	}
	return now << 10, hwm << 10
}

// resetPeak sets the peak resident set of process pid back to its current one (proc(5),
// clear_refs), and reports whether the kernel allowed it.
func resetPeak(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// scanned requests a scan of ImageRepository name and waits until its status records it
// handled, returning the object.
func scanned(t *testing.T, s *stack.Stack, name string) *v1.ImageRepository {
	t.Helper()
	ctx := context.Background()
	token := testenv.RequestToken(time.Now())
	if _, err := s.Kube.Repositories.RequestReconcile(ctx, "default", name, token); err != nil {
		t.Fatal(err)
	}
	var repo *v1.ImageRepository
	testenv.Eventually(t, 90*time.Second, func() error {
		r, err := s.Kube.Repositories.Get(ctx, "default", name)
		if err != nil {
			return err
		}
		if r.Status.LastHandledReconcileAt != token {
			return fmt.Errorf("lastHandledReconcileAt %q, want %q; logs in %s", r.Status.LastHandledReconcileAt, token, s.Log(stack.Scan))
		}
		repo = r
		return nil
	})
	return repo
}

// ready returns the Ready condition of repo.
func ready(repo *v1.ImageRepository) metav1.Condition {
	for _, c := range repo.Status.Conditions {
		if c.Type == v1.ReadyCondition {
			return c
		}
	}
	return metav1.Condition{}
}

// TestHostileRegistryIntegration points an ImageRepository of the real running stack at a
// registry on 127.0.0.1 that answers as a hostile tenant's would: tags outside the grammar,
// a 48 KiB error body, pages of 200 MiB. None of it reaches the store, a status or a policy,
// every scan ends with its status written, and the scan function's memory grows by at most
// 64 MiB.
func TestHostileRegistryIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: time.Hour})
	reg := testenv.NewRegistry(t)
	reg.Push(t, "hostile/app", "v1.0.0", "v2.0.0")
	page := rawTagPage(append([]string{"v1.0.0", "v2.0.0"}, invalidTags...))
	listing := func() testenv.RegistryFault {
		return testenv.RegistryFault{Path: "/tags/list", Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: page}
	}
	// The first scan follows the object's creation. Each later one is requested, after one
	// fault is queued for it: a fault left over would answer the next scan instead.
	reg.Inject(listing())
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(hostileManifests, reg.Image("hostile/app")))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, func() error {
		r, err := s.Kube.Repositories.Get(ctx, "default", "hostile")
		if err == nil && r.Status.LastScanResult == nil {
			err = fmt.Errorf("not scanned yet; logs in %s", s.Log(stack.Scan))
		}
		return err
	})

	t.Run("tags outside the grammar are never stored, shown or selected", func(t *testing.T) {
		reg.Inject(listing())
		repo := scanned(t, s, "hostile")
		cond := ready(repo)
		if cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "found 2 tags; left out 5 tags that are not valid tag names") {
			t.Errorf("Ready %s %q", cond.Status, cond.Message)
		}
		if !strings.Contains(cond.Message, `such as "z999`) || len(cond.Message) > 400 {
			t.Errorf("the message has no bounded example: %q", cond.Message)
		}
		if res := repo.Status.LastScanResult; res == nil || res.TagCount != 2 || strings.Join(res.LatestTags, ",") != "v2.0.0,v1.0.0" {
			t.Errorf("lastScanResult %+v", res)
		}
		waitLatest(t, s, "hostile-alphabetical", "v2.0.0")
		// A push of such a tag is refused before it costs a scan.
		body := fmt.Sprintf(`{"events":[{"id":"hostile-push","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"hostile/app","tag":"zz\u001b[31m"},"request":{"host":%q}}]}`, reg.Host())
		if code, answer := send(t, s.ScanURL+"/hook/distribution/default", strings.NewReader(body), map[string]string{"Authorization": "Bearer " + s.Token}); code != http.StatusBadRequest {
			t.Errorf("a push of an invalid tag: %d %s, want 400", code, answer)
		}
	})

	t.Run("a 48 KiB error body is bounded and the status written", func(t *testing.T) {
		const planted = "PLANTED-SECRET"
		body := "<html>" + strings.Repeat("<p>registry failure \x1b[31m\u202e</p>\n", 48<<10/36) + "http://robot:" + planted + "@127.0.0.1:1/</html>"
		reg.Inject(testenv.RegistryFault{Path: "/tags/list", Status: http.StatusNotFound, Body: body})
		repo := scanned(t, s, "hostile")
		cond := ready(repo)
		if cond.Status != metav1.ConditionFalse || cond.Reason != v1.ReadOperationFailedReason {
			t.Errorf("Ready %s %s, want False %s", cond.Status, cond.Reason, v1.ReadOperationFailedReason)
		}
		if len(cond.Message) > redact.MaxText || !strings.Contains(cond.Message, "404 Not Found: <html><p>registry failure \\x1b[31m\\u202e</p>\\n") {
			t.Errorf("Ready message of %d bytes: %.300q", len(cond.Message), cond.Message)
		}
		if res := repo.Status.LastScanResult; res == nil || res.TagCount != 2 {
			t.Errorf("the failure lost the last scan result: %+v", res)
		}
		// The recorder posts Events in the background, after the status write.
		var evs *corev1.EventList
		testenv.Eventually(t, 30*time.Second, func() (err error) {
			if evs, err = s.Kube.Events.List(ctx, "default", metav1.ListOptions{}); err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == "hostile" && e.Type == "Warning" {
					return nil
				}
			}
			return errors.New("no Warning Event about the failure")
		})
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "hostile" && (len(e.Message) > redact.MaxText || strings.ContainsAny(e.Message, "\x1b\u202e")) {
				t.Errorf("Event message of %d bytes: %.200q", len(e.Message), e.Message)
			}
		}
		statuses, _ := json.Marshal(repo.Status)
		eventsJSON, _ := json.Marshal(evs.Items)
		places := map[string]string{"status": string(statuses), "Events": string(eventsJSON)}
		for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
			b, _ := os.ReadFile(s.Log(c))
			places[c+" log"] = string(b)
			longest := 0
			sc := bufio.NewScanner(strings.NewReader(string(b)))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				longest = max(longest, len(sc.Bytes()))
			}
			if longest > 4*redact.MaxText {
				t.Errorf("the %s log has a line of %d bytes", c, longest)
			}
		}
		for place, text := range places {
			if strings.Contains(text, planted) {
				t.Errorf("the %s hold the error body's password", place)
			}
		}
	})

	t.Run("200 MiB pages cost at most 64 MiB", func(t *testing.T) {
		const size = 200 << 20
		pid := s.PID(stack.Scan)
		base, _ := residentSet(t, pid)
		if !resetPeak(pid) {
			t.Log("the peak resident set cannot be reset: growth is measured against the peak since the start")
		}
		for _, tt := range []struct {
			name   string
			stream func() io.Reader
			says   string
		}{
			{"one string", func() io.Reader {
				return testenv.Page(`{"tags":["`, testenv.Repeating("a"), size)
			}, "a JSON value of more than 64 KiB"},
			{"tags of 10 kB", func() io.Reader {
				return testenv.Page(`{"tags":["`, testenv.Repeating(strings.Repeat("x", 10_000)+`","`), size)
			}, "larger than 32 MiB"},
			{"distinct valid tags of 128 bytes", func() io.Reader {
				return testenv.Page(`{"tags":[`, testenv.Elements("%0128d"), size)
			}, "more than 200000 tags"},
		} {
			reg.Inject(testenv.RegistryFault{Path: "/tags/list", Status: http.StatusOK, Stream: tt.stream})
			repo := scanned(t, s, "hostile")
			cond := ready(repo)
			if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, tt.says) {
				t.Errorf("%s: Ready %s %q, want False saying %q", tt.name, cond.Status, cond.Message, tt.says)
			}
			rss, peak := residentSet(t, pid)
			t.Logf("%s: scan function resident %d MiB before, %d MiB after, peak %d MiB: growth %d MiB",
				tt.name, base>>20, rss>>20, peak>>20, (peak-base)>>20)
			if peak-base > 64<<20 {
				t.Errorf("%s: the scan function's peak resident set grew by %d MiB, over 64 MiB", tt.name, (peak-base)>>20)
			}
		}
		if s.PID(stack.Scan) != pid {
			t.Error("the scan function was restarted")
		}
		waitLatest(t, s, "hostile-alphabetical", "v2.0.0")
	})
}

// trickleRegistry is a registry on 127.0.0.1 that answers tags/list with a status and headers at
// once and then a body of one byte a second, as a slow or hostile registry can: a scan that
// waits for it is bounded only by its own deadline. Each answer stops by itself after
// trickleBytes bytes, when the client goes away, or when the test ends. Other manifests are
// unknown.
type trickleRegistry struct {
	srv  *httptest.Server
	stop chan struct{}
	// lists counts the tags/list requests, open those whose answer is still being written.
	lists, open atomic.Int32
}

// trickleBytes bounds one trickled answer: a minute at one byte a second, longer than any
// timeout the test gives a scan.
const trickleBytes = 60

func newTrickleRegistry(t *testing.T) *trickleRegistry {
	t.Helper()
	tr := &trickleRegistry{stop: make(chan struct{})}
	tr.srv = httptest.NewServer(http.HandlerFunc(tr.serve))
	// Cleanups run last-in first-out: the answers stop before the server waits for them.
	t.Cleanup(tr.srv.Close)
	t.Cleanup(func() { close(tr.stop) })
	return tr
}

// host is the registry's host:port.
func (tr *trickleRegistry) host() string { return strings.TrimPrefix(tr.srv.URL, "http://") }

func (tr *trickleRegistry) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v2/":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	case strings.HasSuffix(r.URL.Path, "/tags/list"):
		tr.lists.Add(1)
		tr.open.Add(1)
		defer tr.open.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		flusher := w.(http.Flusher)
		flusher.Flush()
		// A valid start, then white space that never ends the object.
		body := `{"tags":["v1.0.0"` + strings.Repeat(" ", trickleBytes)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := range trickleBytes {
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			case <-tr.stop:
				return
			}
			if _, err := io.WriteString(w, body[i:i+1]); err != nil {
				return
			}
			flusher.Flush()
		}
	default:
		http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`, http.StatusNotFound)
	}
}

// TestHostileTrickleIntegration points an ImageRepository of the real running stack, with
// spec.timeout 5s, at a registry that sends its tag list one byte a second, and pushes to it:
// the webhook is answered once the request is recorded, without waiting for the registry, and
// the scan's outcome, a timeout that names the ImageRepository's timeout, is in the status
// within the timeout and a few seconds of the webhook, after one listing request: no retry
// multiplies the wait.
func TestHostileTrickleIntegration(t *testing.T) {
	const timeout = 5 * time.Second
	// The bound a scan is held to: its timeout, and a few seconds to record its outcome.
	const bound = timeout + 10*time.Second
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: time.Hour})
	reg := newTrickleRegistry(t)
	manifest := fmt.Sprintf(`apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: trickle
spec:
  image: %s/trickle/app
  interval: 1h
  timeout: %s
  insecure: true
`, reg.host(), timeout)
	if _, err := s.Env.Apply(ctx, "default", []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	// The scan that follows the creation meets the trickle too; the push is sent once it has
	// ended, so that the push's scan is not collected behind it.
	testenv.Eventually(t, 90*time.Second, func() error {
		r, err := s.Kube.Repositories.Get(ctx, "default", "trickle")
		if err == nil && ready(r).Status != metav1.ConditionFalse {
			err = fmt.Errorf("not failed yet: Ready %q; logs in %s", ready(r).Status, s.Log(stack.Scan))
		}
		return err
	})
	// Each push's scan may find its request's patch returned and its own deadline passed at
	// once when it records its outcome: several pushes, so that an outcome that depends on which
	// of the two it notices first shows.
	for i := range 4 {
		listsBefore := reg.lists.Load()
		body := fmt.Sprintf(`{"events":[{"id":"trickle-push-%d","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"trickle/app","tag":"v2.0.%d"},"request":{"host":%q}}]}`, i, i, reg.host())
		sent := time.Now()
		if code, answer := send(t, s.ScanURL+"/hook/distribution/default", strings.NewReader(body), map[string]string{"Authorization": "Bearer " + s.Token}); code != http.StatusAccepted {
			t.Fatalf("push %d: webhook: %d %s", i, code, answer)
		}
		// The answer follows the commit point, and the commit point does not wait for the
		// registry: the request is recorded while the scan is still on the registry.
		repo, err := s.Kube.Repositories.Get(ctx, "default", "trickle")
		if err != nil {
			t.Fatal(err)
		}
		token := repo.Annotations[v1.ReconcileRequestAnnotation]
		if !reconcile.RequestedByPush(repo) {
			t.Fatalf("push %d: after the answer the request annotation is %q, not a push's request", i, token)
		}
		if repo.Status.LastHandledReconcileAt == token {
			t.Fatalf("push %d: the webhook was answered after the scan had ended: the commit point waited for the registry", i)
		}

		var took time.Duration
		testenv.EventuallyEvery(t, bound+30*time.Second, 50*time.Millisecond, func() error {
			r, err := s.Kube.Repositories.Get(ctx, "default", "trickle")
			if err != nil {
				return err
			}
			if r.Status.LastHandledReconcileAt != token {
				return fmt.Errorf("push %d: the scan's outcome is not in the status %s after the webhook: lastHandledReconcileAt %q, want %q; logs in %s",
					i, time.Since(sent).Round(time.Second), r.Status.LastHandledReconcileAt, token, s.Log(stack.Scan))
			}
			took, repo = time.Since(sent), r
			return nil
		})
		t.Logf("push %d: the status was written %s after the webhook", i, took.Round(time.Millisecond))
		if took > bound {
			t.Errorf("push %d: the status was written %s after the webhook, beyond the scan's timeout of %s and 10s to record it", i, took.Round(time.Millisecond), timeout)
		}
		cond := ready(repo)
		// The message names the ImageRepository's timeout; under heavy load it has been seen to
		// say only that the deadline was exceeded (the outcome and its time were right), which
		// the log lines below help to tell apart.
		named := strings.Contains(cond.Message, "timed out after "+timeout.String()+" (the ImageRepository's timeout)")
		if !named && strings.Contains(cond.Message, "context deadline exceeded") {
			t.Logf("push %d: the deadline is not named as the ImageRepository's timeout: %q; the scan function's lines about it:\n%s",
				i, cond.Message, logLines(t, s.Log(stack.Scan), "trickle"))
			named = true
		}
		if cond.Status != metav1.ConditionFalse || cond.Reason != v1.ReadOperationFailedReason || !named {
			t.Errorf("push %d: Ready %s %s %q, want False %s naming the timeout; the scan function's lines about it:\n%s",
				i, cond.Status, cond.Reason, cond.Message, v1.ReadOperationFailedReason, logLines(t, s.Log(stack.Scan), "trickle"))
		}
		if n := reg.lists.Load() - listsBefore; n != 1 {
			t.Errorf("push %d: the scan sent %d tags/list requests, want 1", i, n)
		}
	}
	logs, _ := os.ReadFile(s.Log(stack.Scan))
	if strings.Contains(string(logs), "recording the scan request") {
		t.Errorf("the scan gave up waiting for its request's patch; logs in %s", s.Log(stack.Scan))
	}
}

// logLines returns the lines of the log at path that contain word.
func logLines(t *testing.T, path, word string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
