package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// eventsOf waits until the Events of ns have stopped changing for half a second and returns how
// many objects there are and the sum of their counts.
func eventsOf(t *testing.T, c *kube.Client, ns string) (objects, total int) {
	t.Helper()
	last, changed := -1, time.Now()
	testenv.Eventually(t, 10*time.Second, func() error {
		list, err := c.Events.List(context.Background(), ns, metav1.ListOptions{})
		if err != nil {
			return err
		}
		objects, total = len(list.Items), 0
		for _, e := range list.Items {
			total += int(max(e.Count, 1))
		}
		if total != last || total == 0 {
			last, changed = total, time.Now()
			return fmt.Errorf("%d Events counting %d, still changing", objects, total)
		}
		if time.Since(changed) < 500*time.Millisecond {
			return fmt.Errorf("%d Events counting %d, unchanged for %v", objects, total, time.Since(changed))
		}
		return nil
	})
	return objects, total
}

// A repository that fails on every scan does not flood the API server: identical Warnings become
// one Event with a count, and a rate limit per object caps what is written.
func TestRecorderIntegrationAggregatesRepeats(t *testing.T) {
	c, ns := newRepo(t)
	repo, err := c.Repositories.Get(context.Background(), ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	rec := kube.NewRecorder(c, "reflector-test")
	t.Cleanup(rec.Shutdown)
	for range 60 {
		rec.Warning(repo, "ReadOperationFailed", "GET https://ghcr.io/v2/org/app/tags/list: 503 Service Unavailable")
	}
	objects, total := eventsOf(t, c, ns)
	if objects != 1 {
		t.Errorf("%d Event objects for 60 identical warnings, want 1", objects)
	}
	if total >= 60 {
		t.Errorf("the Event counts %d of 60 warnings: nothing was rate-limited", total)
	}
	t.Logf("60 identical warnings: %d Event, count %d", objects, total)
}

// Warnings whose messages differ (a timestamp, a request id) are combined too.
func TestRecorderIntegrationCombinesSimilar(t *testing.T) {
	c, ns := newRepo(t)
	repo, err := c.Repositories.Get(context.Background(), ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	rec := kube.NewRecorder(c, "reflector-test")
	t.Cleanup(rec.Shutdown)
	for i := range 60 {
		rec.Warning(repo, "ReadOperationFailed", fmt.Sprintf("request %d: 503 Service Unavailable", i))
	}
	objects, total := eventsOf(t, c, ns)
	if objects > 11 {
		t.Errorf("%d Event objects for 60 similar warnings, want at most 11 (10, then one combined)", objects)
	}
	if total >= 60 {
		t.Errorf("the Events count %d of 60 warnings: nothing was rate-limited", total)
	}
	t.Logf("60 similar warnings: %d Events, counts summing to %d", objects, total)
}

// An Event's message never carries URL userinfo, whatever error it came from.
func TestRecorderIntegrationHidesURLUserinfo(t *testing.T) {
	c, ns := newRepo(t)
	repo, err := c.Repositories.Get(context.Background(), ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	rec := kube.NewRecorder(c, "reflector-test")
	rec.Warning(repo, "ReadOperationFailed", `Get "http://u:planted-password@127.0.0.1:1/v2/": EOF`)
	rec.Normal(repo, "Succeeded", "sink socks5://u:planted-password@127.0.0.1:1080")
	// Shutting the recorder down may drop what it has not sent yet: wait for both first.
	defer rec.Shutdown()
	var messages []string
	testenv.Eventually(t, 10*time.Second, func() error {
		list, err := c.Events.List(context.Background(), ns, metav1.ListOptions{})
		if err != nil {
			return err
		}
		messages = messages[:0]
		for _, e := range list.Items {
			messages = append(messages, e.Message)
		}
		if len(messages) != 2 {
			return fmt.Errorf("%d Events, want 2: %q", len(messages), messages)
		}
		return nil
	})
	got := strings.Join(messages, "\n")
	if len(messages) != 2 || strings.Contains(got, "planted-password") ||
		!strings.Contains(got, `Get "http://xxxxx@127.0.0.1:1/v2/": EOF`) || !strings.Contains(got, "sink socks5://xxxxx@127.0.0.1:1080") {
		t.Errorf("Events: %q", messages)
	}
}

// As Flux's recorder does, an Event carries the object's event.toolkit.fluxcd.io/ annotations,
// and no others.
func TestRecorderIntegrationCarriesEventAnnotations(t *testing.T) {
	c, ns := newRepo(t)
	repo, err := c.Repositories.Get(context.Background(), ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	repo.Annotations = map[string]string{"event.toolkit.fluxcd.io/team": "platform", "example.com/other": "x"}
	rec := kube.NewRecorder(c, "reflector-test")
	defer rec.Shutdown()
	rec.Normal(repo, "Succeeded", "successful scan: found 1 tags")
	var events []corev1.Event
	testenv.Eventually(t, 10*time.Second, func() error {
		list, err := c.Events.List(context.Background(), ns, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if events = list.Items; len(events) != 1 {
			return fmt.Errorf("%d Events, want 1", len(events))
		}
		return nil
	})
	if a := events[0].Annotations; len(a) != 1 || a["event.toolkit.fluxcd.io/team"] != "platform" {
		t.Errorf("Event annotations %v", a)
	}
}
