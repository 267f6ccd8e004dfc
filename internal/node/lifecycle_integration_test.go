package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/imagereflector/reflector/internal/node"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// lifecycle drives what an operator and Flux's CLI do to a running installation, through real
// pods: the store outlives the functions' pods, `flux reconcile`, `suspend` and `resume` reach
// the functions through the ApiServerSource, the CronJob's pod repairs a policy whose event was
// dropped, and a deleted ImageRepository's tags leave the store while its policy keeps its
// latestRef.
func lifecycle(ctx context.Context, t *testing.T, c *node.Cluster, p *pushes, kustomization string) {
	t.Run("the store survives the functions' pods", func(t *testing.T) {
		key := storeKey(ctx, t, c)
		if _, err := c.Kubectl(ctx, nil, "delete", "pod", "-n", "reflector-system", "-l", "serving.knative.dev/service", "--wait=true", "--timeout=2m"); err != nil {
			t.Fatal(err)
		}
		t.Logf("push to latestRef after the functions' pods were deleted: %s", ms(p.pushToLatest(ctx, t, "1.2.0", 3*time.Minute)))
		if again := storeKey(ctx, t, c); !bytes.Equal(key, again) {
			t.Error("the store's key changed: the store was made anew")
		}
	})

	t.Run("flux reconcile, suspend and resume", func(t *testing.T) {
		flux(ctx, t, c, "reconcile", "image", "repository", "app", "-n", p.namespace, "--timeout=2m")
		flux(ctx, t, c, "suspend", "image", "repository", "app", "-n", p.namespace)
		p.push(t, "1.3.0")
		time.Sleep(10 * time.Second)
		if got := p.latest(ctx, t); got != p.repo+":1.2.0" {
			t.Errorf("latestRef moved to %s while the repository was suspended", got)
		}
		flux(ctx, t, c, "resume", "image", "repository", "app", "-n", p.namespace, "--timeout=2m")
		p.waitLatest(ctx, t, p.repo+":1.3.0", 2*time.Minute)
	})

	t.Run("the CronJob repairs a dropped TagsChanged", func(t *testing.T) {
		if _, err := c.Kubectl(ctx, nil, "delete", "trigger", "reflector-tags-changed", "-n", "reflector-system"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p.push(t, "1.4.0")
		// The cron reconciler runs every minute.
		p.waitLatest(ctx, t, p.repo+":1.4.0", 4*time.Minute)
		t.Logf("latestRef repaired %s after a push whose TagsChanged had no Trigger", time.Since(start).Round(time.Second))
		if err := c.ApplyUntil(ctx, "knative/", 2*time.Minute, nil, "-k", kustomization); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Kubectl(ctx, nil, "wait", "--for=condition=Ready", "trigger/reflector-tags-changed", "-n", "reflector-system", "--timeout=2m"); err != nil {
			t.Fatal(err)
		}
		// The Trigger made again has a ServiceAccount of the same name as the deleted one's, but
		// not the same: the broker's filter still presents the token it was given for the
		// deleted one, which the apiserver no longer accepts, and the policy function answers
		// 401 (docs/operations.md), unless a pod of it that accepted that token in the last
		// five minutes (tokenreview.CacheTTL) still runs. The filter's pod is restarted, as
		// docs/operations.md says.
		live := p.eventOnly(ctx, t, "1.5.0", 30*time.Second)
		t.Logf("a push through the Trigger made again, before the broker's filter restarts: %s", live)
		if _, err := c.Kubectl(ctx, nil, "rollout", "restart", "deployment/mt-broker-filter", "-n", "knative-eventing"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Kubectl(ctx, nil, "rollout", "status", "deployment/mt-broker-filter", "-n", "knative-eventing", "--timeout=3m"); err != nil {
			t.Fatal(err)
		}
		// The next step needs TagsChanged delivered again: a push reaches latestRef while the
		// CronJob is suspended.
		if live = p.eventOnly(ctx, t, "1.6.0", 30*time.Second); !strings.HasPrefix(live, "delivered") {
			t.Fatalf("a push through the Trigger made again, after the broker's filter restarted: %s", live)
		}
		t.Logf("a push through the Trigger made again, after the broker's filter restarted: %s", live)
	})

	t.Run("a deleted ImageRepository", func(t *testing.T) {
		deleted := time.Now()
		if _, err := c.Kubectl(ctx, nil, "delete", "imagerepository", "app", "-n", p.namespace); err != nil {
			t.Fatal(err)
		}
		// The scan function forgets a deleted repository's tags when the ApiServerSource tells
		// it; the store is read here as the policy function reads it, beside the writers.
		st := store.New(storeDir(ctx, t, c), store.ReadOnly())
		defer st.Close()
		key := p.namespace + "/app"
		err := testenv.Poll(ctx, 2*time.Minute, time.Second, func() error {
			keys, err := st.Keys(ctx)
			if err == nil && slices.Contains(keys, key) {
				err = fmt.Errorf("the store still holds %s", key)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		forgotten := time.Since(deleted)
		// Its policy hears of it, as Flux's does: not Ready, latestRef kept. The announcement
		// does it in seconds; when it is lost, the CronJob's next pass: a minute's schedule, its
		// Job's pod and the policy function's, so up to two and a half minutes.
		var ready string
		passes := cronPasses{}
		err = testenv.Poll(ctx, 150*time.Second, time.Second, func() error {
			passes.see(ctx, t, c, deleted)
			pol, err := p.c.Dynamic().Resource(policies).Namespace(p.namespace).Get(ctx, "app", metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(pol.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
					ready = fmt.Sprintf("%v %v: %v", m["status"], m["reason"], m["message"])
					if m["status"] == "False" && m["reason"] == "DependencyNotReady" {
						return nil
					}
				}
			}
			return errors.New("Ready is " + ready)
		})
		repaired := time.Since(deleted)
		t.Logf("the deleted repository: its tags left the store %s after the deletion, its policy was not Ready %s after it, %s",
			forgotten.Round(100*time.Millisecond), repaired.Round(100*time.Millisecond), passes)
		if err != nil {
			t.Errorf("the policy of the deleted repository: %v", err)
		}
		if got := p.latest(ctx, t); got != p.repo+":1.6.0" {
			t.Errorf("latestRef is %q after the repository's deletion, want it kept at 1.6.0", got)
		}
	})
}

// eventOnly pushes tag with the CronJob suspended, so that only the push's TagsChanged can move
// latestRef, and tells what happened within: "delivered in ..." or what the policy function
// answered the broker meanwhile. The CronJob is resumed before it returns.
func (p *pushes) eventOnly(ctx context.Context, t *testing.T, tag string, within time.Duration) string {
	t.Helper()
	suspendCron(ctx, t, p.c, true)
	defer suspendCron(ctx, t, p.c, false)
	// A pass that was running when the CronJob was suspended ends first.
	err := testenv.Poll(ctx, 2*time.Minute, time.Second, func() error {
		if n := activeCronJobs(ctx, t, p.c); n > 0 {
			return fmt.Errorf("%d of the CronJob's Jobs still active", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.push(t, tag)
	want := p.repo + ":" + tag
	err = testenv.Poll(ctx, within, 250*time.Millisecond, func() error {
		if got := p.latest(ctx, t); got != want {
			return errors.New("latestRef is " + got)
		}
		return nil
	})
	if err == nil {
		return "delivered in " + ms(time.Since(start))
	}
	answers := map[int]int{}
	reqs, rerr := p.c.Requests("reflector-system", "reflector-policy-", "queue-proxy")
	for _, r := range reqs {
		if r.End.After(start) {
			answers[r.Status]++
		}
	}
	return fmt.Sprintf("not delivered within %s (%v); the policy function's answers since the push, by status: %v (%v)", within, err, answers, rerr)
}

// suspendCron suspends or resumes the cron reconciler's CronJob.
func suspendCron(ctx context.Context, t *testing.T, c *node.Cluster, suspend bool) {
	t.Helper()
	if _, err := c.Kubectl(ctx, nil, "patch", "cronjob", "reflector-cron", "-n", "reflector-system", "--type", "merge",
		"-p", fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)); err != nil {
		t.Fatal(err)
	}
}

// cronJobs lists the Jobs of the cron reconciler's CronJob.
func cronJobs(ctx context.Context, t *testing.T, c *node.Cluster) []batchv1.Job {
	t.Helper()
	jobs, err := c.Clientset().BatchV1().Jobs("reflector-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=reflector-cron"})
	if err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// activeCronJobs returns how many of the CronJob's Jobs have not ended.
func activeCronJobs(ctx context.Context, t *testing.T, c *node.Cluster) int {
	t.Helper()
	n := 0
	for _, j := range cronJobs(ctx, t, c) {
		if j.Status.CompletionTime == nil && j.Status.Failed == 0 {
			n++
		}
	}
	return n
}

// cronPasses are the CronJob's Jobs seen to start after a moment, with their start time from
// that moment: the CronJob keeps one finished Job only, so they are collected as they come.
type cronPasses map[string]time.Duration

// see adds the Jobs that started after since.
func (cp cronPasses) see(ctx context.Context, t *testing.T, c *node.Cluster, since time.Time) {
	t.Helper()
	for _, j := range cronJobs(ctx, t, c) {
		if j.Status.StartTime != nil && !j.Status.StartTime.Time.Before(since.Truncate(time.Second)) {
			cp[j.Name] = j.Status.StartTime.Time.Sub(since).Round(time.Second)
		}
	}
}

func (cp cronPasses) String() string {
	if len(cp) == 0 {
		return "and no pass of the CronJob started meanwhile: the announcement did it"
	}
	var passes []string
	for name, at := range cp {
		passes = append(passes, fmt.Sprintf("%s at +%s", name, at))
	}
	slices.Sort(passes)
	return "and the CronJob's passes started meanwhile: " + strings.Join(passes, ", ")
}

// latest returns the ImagePolicy's latestRef.
func (p *pushes) latest(ctx context.Context, t *testing.T) string {
	t.Helper()
	pol, err := p.c.Dynamic().Resource(policies).Namespace(p.namespace).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return latestRef(pol)
}

// waitLatest waits until the ImagePolicy's latestRef is want.
func (p *pushes) waitLatest(ctx context.Context, t *testing.T, want string, within time.Duration) {
	t.Helper()
	var got string
	err := testenv.Poll(ctx, within, 250*time.Millisecond, func() error {
		got = p.latest(ctx, t)
		if got != want {
			return errors.New("latestRef is " + got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("latestRef is not %s within %s: %v", want, within, err)
	}
}

// flux runs the flux CLI (`make flux-cli`) inside the node's namespaces with the admin
// kubeconfig.
func flux(ctx context.Context, t *testing.T, c *node.Cluster, args ...string) {
	t.Helper()
	bin := filepath.Join(testenv.BinDir(), "flux")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (make flux-cli)", bin, err)
	}
	argv := c.NS.Wrap(append([]string{bin, "--kubeconfig=" + c.Kubeconfig}, args...))
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("flux %v: %v\n%s", args, err, out)
	}
}

// storeDir returns the store's directory on the volume that the claim reflector-store is bound
// to: where the store keeps its proof key, a file it makes with the directory.
func storeDir(ctx context.Context, t *testing.T, c *node.Cluster) string {
	t.Helper()
	claim, err := c.Clientset().CoreV1().PersistentVolumeClaims("reflector-system").Get(ctx, "reflector-store", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := c.Clientset().CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var dir string
	err = filepath.WalkDir(pv.Spec.Local.Path, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "reflector.key" {
			dir = filepath.Dir(path)
		}
		return err
	})
	if err != nil || dir == "" {
		t.Fatalf("no reflector.key on the store's volume %s: %v", pv.Spec.Local.Path, err)
	}
	return dir
}

// storeKey returns the store's proof key.
func storeKey(ctx context.Context, t *testing.T, c *node.Cluster) []byte {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(storeDir(ctx, t, c), "reflector.key"))
	if err != nil || len(key) == 0 {
		t.Fatalf("the store's key: %v", err)
	}
	return key
}
