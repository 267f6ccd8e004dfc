package kube_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// BenchmarkCacheHeld measures the memory a Cache holds per ImagePolicy, against the real
// apiserver of testenv: 1,000 policies, each with the status an evaluation writes (latestRef,
// observedPreviousRef, Ready and TagsEvaluated), are listed by a new Cache, and the live heap
// after its first listing, less the live heap before it, is reported per object (bytes/object).
// Each iteration starts and stops one Cache.
func BenchmarkCacheHeld(b *testing.B) {
	const objects = 1000
	env := testenv.Kube(b)
	c := env.Client(b)
	ns := env.Namespace(b)
	ctx := context.Background()
	for i := range objects {
		name := fmt.Sprintf("app-%04d", i)
		p, err := c.Policies.Create(ctx, &v1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.ImagePolicySpec{ImageRepositoryRef: v1.NamespacedObjectReference{Name: name},
				Policy: v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: ">=1.0.0"}}},
		})
		if err != nil {
			b.Fatal(err)
		}
		next := p.DeepCopy()
		image := "ghcr.io/example-org/" + name
		next.Status.LatestRef = &v1.ImageRef{Name: image, Tag: "1.4.2",
			Digest: "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"}
		next.Status.ObservedPreviousRef = &v1.ImageRef{Name: image, Tag: "1.4.1"}
		next.Status.ObservedGeneration = p.Generation
		next.Status.ObservedTagsRevision = "sha256:9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9"
		apimeta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: v1.ReadyCondition,
			Status: metav1.ConditionTrue, Reason: v1.SucceededReason, ObservedGeneration: p.Generation,
			Message: "Latest image tag for '" + image + "' updated from 1.4.1 to 1.4.2"})
		apimeta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: v1.TagsEvaluatedCondition,
			Status: metav1.ConditionTrue, Reason: v1.EvaluatedReason, ObservedGeneration: p.Generation,
			Message: next.Status.ObservedTagsRevision})
		if _, err := c.Policies.PatchStatus(ctx, p, next); err != nil {
			b.Fatal(err)
		}
	}
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var held float64
	b.ResetTimer()
	for range b.N {
		before := live()
		pc := kube.NewCache(c.Policies, map[string]func(*v1.ImagePolicy) string{
			"repository": func(p *v1.ImagePolicy) string { return p.Namespace + "/" + p.Spec.ImageRepositoryRef.Name },
		})
		pc.Start(ctx)
		deadline := time.Now().Add(time.Minute)
		for {
			if all, ok := pc.List(ns); ok && len(all) == objects {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the cache did not hold every policy within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		held += float64(int64(live())-int64(before)) / objects
		runtime.KeepAlive(pc)
		pc.Stop()
	}
	b.ReportMetric(held/float64(b.N), "bytes/object")
}
