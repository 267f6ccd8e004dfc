package kube_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/testenv"
)

// BenchmarkWriteFloor measures, against the real apiserver and etcd of testenv, the apiserver
// calls that a push's way to latestRef cannot do without, one after the other, with nothing else
// running against them: a floor for BenchmarkPushToLatest of internal/stack. Per iteration it
// writes the reconcile-request annotation of an ImageRepository (the webhook's commit point) and
// then its status through the status subresource (the scan's record), and, for the way the
// policy function goes, reads the repository, lists the ImagePolicies of the repository from the
// watch cache (resourceVersion 0, with the field selector the policy function uses), writes the
// ImagePolicy's status and reads the policy back (the benchmark's poll). Reported: the p50 and
// p99 of each call and of the annotation and status write together (pair), and of the policy
// function's list and status write together (policy).
func BenchmarkWriteFloor(b *testing.B) {
	env := testenv.Kube(b)
	c := env.Client(b)
	ns := env.Namespace(b)
	ctx := context.Background()
	repo, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "floor"},
		Spec:       v1.ImageRepositorySpec{Image: "ghcr.io/org/floor", Interval: metav1.Duration{Duration: time.Hour}},
	})
	if err != nil {
		b.Fatal(err)
	}
	pol, err := c.Policies.Create(ctx, &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "floor"},
		Spec: v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Name: "floor"},
			Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: ">=1.0.0"}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	took := map[string][]time.Duration{}
	timed := func(name string, call func() error) {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		took[name] = append(took[name], time.Since(start))
	}
	b.ResetTimer()
	for i := range b.N {
		token := fmt.Sprintf("floor-%d", i)
		start := time.Now()
		timed("annotate", func() error {
			repo, err = c.Repositories.RequestReconcile(ctx, ns, "floor", token)
			return err
		})
		timed("repository_status", func() error {
			next := repo.DeepCopy()
			next.Status.LastHandledReconcileAt = token
			repo, err = c.Repositories.PatchStatus(ctx, repo, next)
			return err
		})
		took["pair"] = append(took["pair"], time.Since(start))

		timed("get_repository", func() error {
			_, err := c.Repositories.Get(ctx, ns, "floor")
			return err
		})
		start = time.Now()
		timed("list_policies_cached", func() error {
			_, err := c.Policies.List(ctx, ns, metav1.ListOptions{ResourceVersion: "0",
				FieldSelector: "spec.imageRepositoryRef.name=floor"})
			return err
		})
		timed("policy_status", func() error {
			next := pol.DeepCopy()
			next.Status.LatestRef = &v1.ImageRef{Name: "ghcr.io/org/floor", Tag: fmt.Sprintf("1.%d.0", i)}
			pol, err = c.Policies.PatchStatus(ctx, pol, next)
			return err
		})
		took["policy"] = append(took["policy"], time.Since(start))
		timed("get_policy", func() error {
			_, err := c.Policies.Get(ctx, ns, "floor")
			return err
		})
	}
	b.StopTimer()
	for name, d := range took {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name+"_p50_ms")
		b.ReportMetric(float64(d[(len(d)*99)/100].Microseconds())/1000, name+"_p99_ms")
	}
}
