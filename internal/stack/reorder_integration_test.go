package stack_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	imagev1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// reorderingSink stands where a Broker stands between the scan and policy functions: it answers
// each CloudEvent at once, as a Broker's ingress does, and delivers it to the policy function.
// While holding, it keeps the TagsChanged events of one subject instead and delivers them later,
// in the opposite order.
type reorderingSink struct {
	t       *testing.T
	subject string

	mu      sync.Mutex
	target  string
	holding bool
	held    []*http.Request
	bodies  [][]byte
}

func (r *reorderingSink) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	if r.holding && req.Header.Get("Ce-Type") == events.TypeTagsChanged && req.Header.Get("Ce-Subject") == r.subject {
		r.held = append(r.held, req)
		r.bodies = append(r.bodies, body)
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		return
	}
	r.mu.Unlock()
	if code := r.deliver(req, body); code >= 300 {
		http.Error(w, "delivery failed", code)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// deliver sends req, with body, to the policy function and returns its status code.
func (r *reorderingSink) deliver(req *http.Request, body []byte) int {
	r.mu.Lock()
	target := r.target
	r.mu.Unlock()
	out, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		r.t.Error(err)
		return http.StatusInternalServerError
	}
	out.Header = req.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		r.t.Errorf("delivering %s to the policy function: %v", req.Header.Get("Ce-Type"), err)
		return http.StatusBadGateway
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode >= 300 {
		r.t.Logf("the policy function answered %s %d: %s", req.Header.Get("Ce-Type"), resp.StatusCode, answer)
	}
	return resp.StatusCode
}

// hold starts holding the TagsChanged events of subject (namespace/name).
func (r *reorderingSink) hold(subject string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subject, r.holding = subject, true
}

// waitHeld waits until n TagsChanged events of the subject are held.
func (r *reorderingSink) waitHeld(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.held) < n {
			return fmt.Errorf("%d TagsChanged events of %s held, want %d", len(r.held), r.subject, n)
		}
		return nil
	})
}

// release stops holding and delivers the held events one after the other, each after the one
// before was answered: the last first when reversed, else in the order they came. It reports
// to t with Errorf only, so that it may run in a goroutine of t's.
func (r *reorderingSink) release(t *testing.T, reversed bool) {
	t.Helper()
	r.mu.Lock()
	r.holding = false
	held, bodies := r.held, r.bodies
	r.held, r.bodies = nil, nil
	r.mu.Unlock()
	if reversed {
		slices.Reverse(held)
		slices.Reverse(bodies)
	}
	for i := range held {
		// As the Broker of knative/eventing.yaml delivers: a server error or 429 is retried three
		// times, 1, 2 and 4 s later. The policy function answers a status write that met a
		// concurrent one (such as a spec edit's) with 500, for the event to come again.
		code := r.deliver(held[i], bodies[i])
		for wait := time.Second; (code >= 500 || code == http.StatusTooManyRequests) && wait <= 4*time.Second; wait *= 2 {
			time.Sleep(wait)
			code = r.deliver(held[i], bodies[i])
		}
		if code >= 300 {
			t.Errorf("the policy function answered %d to a held TagsChanged, retried as a Broker does", code)
		}
	}
}

// TestHeldAnnouncementsIntegration holds the scan function's TagsChanged events of one
// repository in a sink in its K_SINK, which answers as a Broker's ingress does, while the running
// policy function is raced: two pushes' events delivered in the opposite order, a spec edit and
// a withdrawn accessFrom before a push's event arrives. None may end in a latestRef of an earlier
// state, and a watch must never see one.
func TestHeldAnnouncementsIntegration(t *testing.T) {
	ctx := context.Background()
	sink := &reorderingSink{t: t}
	proxy := httptest.NewServer(sink)
	t.Cleanup(proxy.Close)
	s := start(t, stack.Options{CronEvery: time.Hour,
		Env: map[string][]string{stack.Scan: {"K_SINK=" + proxy.URL}}})
	sink.mu.Lock()
	sink.target = s.PolicyURL
	sink.mu.Unlock()
	reg := testenv.NewRegistry(t)

	// setUp makes repository and policy name of namespace default (the policy in policyNS, when
	// set) of a repository in reg holding 1.0.0, and waits for the policy's first evaluation.
	setUp := func(t *testing.T, name, policyNS, repoExtra, rng string) string {
		t.Helper()
		image := reg.Image(name + "/app")
		reg.Push(t, name+"/app", "1.0.0")
		repo := fmt.Sprintf("apiVersion: image.toolkit.fluxcd.io/v1\nkind: ImageRepository\nmetadata:\n  name: %s\n"+
			"spec:\n  image: %s\n  interval: 1h\n  insecure: true\n%s", name, image, repoExtra)
		if _, err := s.Env.Apply(ctx, "default", []byte(repo)); err != nil {
			t.Fatal(err)
		}
		pol := fmt.Sprintf("apiVersion: image.toolkit.fluxcd.io/v1\nkind: ImagePolicy\nmetadata:\n  name: %s\n"+
			"spec:\n  imageRepositoryRef:\n    name: %s\n    namespace: default\n  policy:\n    semver:\n      range: '%s'\n",
			name, name, rng)
		if _, err := s.Env.Apply(ctx, policyNS, []byte(pol)); err != nil {
			t.Fatal(err)
		}
		waitTagIn(t, s, policyNS, name, "1.0.0")
		return image
	}
	// pushHeld pushes tag into name's repository and announces it by webhook; the scan's
	// TagsChanged is held. tags is the number of tags the repository then holds.
	pushHeld := func(t *testing.T, image, name, tag string, tags int) {
		t.Helper()
		reg.Push(t, name+"/app", tag)
		post(t, s, image, name+"/app", tag)
		testenv.Eventually(t, 30*time.Second, func() error {
			r, err := s.Kube.Repositories.Get(ctx, "default", name)
			if err != nil {
				return err
			}
			if r.Status.LastScanResult == nil || r.Status.LastScanResult.TagCount != tags {
				return fmt.Errorf("ImageRepository %s holds %+v, want %d tags", name, r.Status.LastScanResult, tags)
			}
			return nil
		})
	}

	t.Run("events in the opposite order", func(t *testing.T) {
		image := setUp(t, "order", "default", "", "^1.x")
		seen := watchTags(t, s, "default", "order")
		sink.hold("default/order")
		pushHeld(t, image, "order", "1.1.0", 2)
		pushHeld(t, image, "order", "1.2.0", 3)
		sink.waitHeld(t, 2)
		if got := policyTag(t, s, "default", "order"); got != "1.0.0" {
			t.Fatalf("with both announcements held, latestRef is %s, want 1.0.0", got)
		}
		sink.release(t, true)
		waitTagIn(t, s, "default", "order", "1.2.0")
		settleTags(t, seen, "1.0.0", "1.2.0")
		// The policy records the revision it evaluated last, the repository's latest: the
		// earlier push's event did not write its own revision over it, which would send the next
		// push's delta to the store, or let the cron reconciler take the policy for one behind.
		r, err := s.Kube.Repositories.Get(ctx, "default", "order")
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Kube.Policies.Get(ctx, "default", "order")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.LastScanResult == nil || got.Status.ObservedTagsRevision != r.Status.LastScanResult.Revision {
			t.Fatalf("ImagePolicy order records revision %q; want the repository's revision %+v", got.Status.ObservedTagsRevision, r.Status.LastScanResult)
		}
	})

	t.Run("a spec edit racing a push's event", func(t *testing.T) {
		image := setUp(t, "edit", "default", "", "^1.x")
		seen := watchTags(t, s, "default", "edit")
		sink.hold("default/edit")
		pushHeld(t, image, "edit", "1.1.0", 2)
		sink.waitHeld(t, 1)
		p, err := s.Kube.Policies.Get(ctx, "default", "edit")
		if err != nil {
			t.Fatal(err)
		}
		// The push's event, whose delta would advance the old spec (^1.x) to 1.1.0, goes to the
		// policy function as the edit (<1.1.0) reaches the apiserver.
		released := make(chan struct{})
		go func() {
			defer close(released)
			sink.release(t, false)
		}()
		// A status write may come between the read and the edit (the push's own evaluation, or
		// the repository's): the edit is then made again on the object as it stands.
		var edited *imagev1.ImagePolicy
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p.Spec.Policy.SemVer.Range = "<1.1.0"
			var err error
			if edited, err = s.Kube.Policies.Update(ctx, p); apierrors.IsConflict(err) {
				if now, gerr := s.Kube.Policies.Get(ctx, "default", "edit"); gerr == nil {
					p = now
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		<-released
		testenv.Eventually(t, 30*time.Second, func() error {
			got, err := s.Kube.Policies.Get(ctx, "default", "edit")
			if err != nil {
				return err
			}
			if got.Status.ObservedGeneration != edited.Generation {
				return fmt.Errorf("ImagePolicy edit observed generation %d, want %d", got.Status.ObservedGeneration, edited.Generation)
			}
			return nil
		})
		// 1.1.0 may show for a moment, when the event's evaluation wrote before the edit was
		// read; the end is the new spec's outcome. Most runs meet the status write's guard: the
		// event's outcome, derived from a status the edit's evaluation has replaced since, is not
		// written, and the function answers 500 for the event to come again.
		settleTags(t, seen, "1.1.0", "1.0.0")
		got, err := s.Kube.Policies.Get(ctx, "default", "edit")
		if err != nil {
			t.Fatal(err)
		}
		if refTag(got.Status.LatestRef) != "1.0.0" || got.Status.ObservedGeneration != edited.Generation {
			t.Fatalf("after the race, latestRef %s of generation %d; want 1.0.0 of %d (range <1.1.0)",
				refTag(got.Status.LatestRef), got.Status.ObservedGeneration, edited.Generation)
		}
	})

	t.Run("cross-namespace access withdrawn before a push's event arrives", func(t *testing.T) {
		other := s.Env.Namespace(t)
		image := setUp(t, "shared", other, "  accessFrom:\n    namespaceSelectors:\n    - matchLabels: {}\n", ">=1.0.0")
		seen := watchTags(t, s, other, "shared")
		sink.hold("default/shared")
		pushHeld(t, image, "shared", "1.1.0", 2)
		sink.waitHeld(t, 1)
		r, err := s.Kube.Repositories.Get(ctx, "default", "shared")
		if err != nil {
			t.Fatal(err)
		}
		r.Spec.AccessFrom = nil
		if _, err := s.Kube.Repositories.Update(ctx, r); err != nil {
			t.Fatal(err)
		}
		// What the withdrawal's own scan announces is held as well; the push's event, made
		// while access was granted, is delivered first.
		time.Sleep(time.Second)
		sink.release(t, false)
		testenv.Eventually(t, 30*time.Second, func() error {
			got, err := s.Kube.Policies.Get(ctx, other, "shared")
			if err != nil {
				return err
			}
			if c := apimeta.FindStatusCondition(got.Status.Conditions, imagev1.ReadyCondition); c == nil || c.Reason != imagev1.AccessDeniedReason {
				return fmt.Errorf("ImagePolicy %s/shared Ready is %+v, want %s", other, c, imagev1.AccessDeniedReason)
			}
			return nil
		})
		settleTags(t, seen, "1.0.0")
		if got := policyTag(t, s, other, "shared"); got != "1.0.0" {
			t.Fatalf("after access was withdrawn, latestRef is %s, want 1.0.0 kept", got)
		}
	})
}

// watchTags watches the ImagePolicy namespace/name from its present state and returns a
// channel of the latestRef tags the watch delivers.
func watchTags(t *testing.T, s *stack.Stack, namespace, name string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := s.Kube.Policies.Get(ctx, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Kube.Policies.Watch(ctx, namespace, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 256)
	go func() {
		defer w.Stop()
		defer close(out)
		for ev := range w.ResultChan() {
			if got, ok := ev.Object.(*imagev1.ImagePolicy); ok {
				select {
				case out <- refTag(got.Status.LatestRef):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// settleTags reads what seen delivers until it has been quiet for three seconds and fails when
// a latestRef outside allowed came, or when the last one is not allowed's last.
func settleTags(t *testing.T, seen <-chan string, allowed ...string) {
	t.Helper()
	var got []string
	for {
		select {
		case tag, ok := <-seen:
			if !ok {
				t.Fatal("the watch of the ImagePolicy ended")
			}
			if len(got) == 0 || got[len(got)-1] != tag {
				got = append(got, tag)
			}
			continue
		case <-time.After(3 * time.Second):
		}
		break
	}
	for _, tag := range got {
		if !slices.Contains(allowed, tag) {
			t.Fatalf("a watch saw latestRef %q; only %q may be seen (saw %q)", tag, allowed, got)
		}
	}
	if len(got) > 0 && got[len(got)-1] != allowed[len(allowed)-1] {
		t.Fatalf("latestRef ended at %q, want %s (the watch saw %q)", got[len(got)-1], allowed[len(allowed)-1], got)
	}
}
