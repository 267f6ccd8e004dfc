package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
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
