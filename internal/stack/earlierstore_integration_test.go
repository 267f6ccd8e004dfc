package stack_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// plantEarlierEntry writes the entry of key into the store directory as a version that kept
// tags outside the grammar wrote it, by the layout docs/store.md gives: the listed tags byte
// for byte under tags/<key>, their revision and the entry's identity under meta/<key>, without
// the deltas a push writes today. It returns the revision.
func plantEarlierEntry(t *testing.T, dir, key string, tags []string) string {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueLogFileSize(16 << 20))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	value := []byte(rawTagPage(tags))
	value = value[strings.IndexByte(string(value), '[') : len(value)-1]
	sum := sha256.Sum256(value)
	rev := "sha256:" + hex.EncodeToString(sum[:])
	err = db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte("meta/" + key))
		if err != nil {
			return err
		}
		var meta map[string]any
		if err := item.Value(func(b []byte) error { return json.Unmarshal(b, &meta) }); err != nil {
			return err
		}
		// That version's header held these fields only, and it wrote no deltas.
		b, _ := json.Marshal(map[string]any{"revision": rev, "scanTime": meta["scanTime"], "identity": meta["identity"]})
		if err := txn.Set([]byte("meta/"+key), b); err != nil {
			return err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("delta/" + key + "/")})
		var deltas [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			deltas = append(deltas, it.Item().KeyCopy(nil))
		}
		it.Close()
		for _, k := range deltas {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return txn.Set([]byte("tags/"+key), value)
	})
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestStoreOfAnEarlierVersionIntegration starts the functions on a tag store that a version
// which kept tags outside the grammar wrote, with an alphabetical policy whose latestRef that
// version set to such a tag from exactly that list: a push then reaches a latestRef of the
// grammar (the policy function does not advance from the old one, and the store no longer
// returns the tag), and the repository's status never shows one.
func TestStoreOfAnEarlierVersionIntegration(t *testing.T) {
	ctx := context.Background()
	s := start(t, stack.Options{CronEvery: time.Hour})
	image := s.Registry + "/earlier/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(fmt.Sprintf(hostileManifests, image))); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"v1.0.0", "v2.0.0"} {
		if _, err := stack.Push(image + ":" + tag); err != nil {
			t.Fatal(err)
		}
	}
	waitLatest(t, s, "hostile-alphabetical", "v2.0.0")

	for _, c := range []string{stack.Cron, stack.Scan, stack.Policy} {
		if err := s.Kill(c, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	const planted = "zz\x1b[31mred"
	rev := plantEarlierEntry(t, s.StoreDir(), "default/hostile", append([]string{"v1.0.0", "v2.0.0"}, invalidTags...))
	pol, err := s.Kube.Policies.Get(ctx, "default", "hostile-alphabetical")
	if err != nil {
		t.Fatal(err)
	}
	st := pol.Status.DeepCopy()
	st.LatestRef.Tag, st.LatestRef.Digest = planted, ""
	ev := apimeta.FindStatusCondition(st.Conditions, v1.TagsEvaluatedCondition)
	if ev == nil {
		t.Fatalf("policy status without %s: %+v", v1.TagsEvaluatedCondition, st.Conditions)
	}
	ev.Message = rev
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"latestRef": st.LatestRef, "conditions": st.Conditions,
		"observedTagsRevision": rev}})
	gvr := schema.GroupVersionResource{Group: v1.GroupVersion.Group, Version: v1.GroupVersion.Version, Resource: "imagepolicies"}
	if _, err := s.Env.Dynamic().Resource(gvr).Namespace("default").Patch(ctx, "hostile-alphabetical", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
		if err := s.Restart(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	// One pushed tag is confirmed and added to the stored list: the incremental path, which
	// reads the old entry and announces a delta from its revision.
	if _, err := stack.Push(image + ":v1.5.0"); err != nil {
		t.Fatal(err)
	}
	waitLatest(t, s, "hostile-alphabetical", "v2.0.0")
	testenv.Eventually(t, 60*time.Second, func() error {
		repo, err := s.Kube.Repositories.Get(ctx, "default", "hostile")
		if err != nil {
			return err
		}
		res := repo.Status.LastScanResult
		if res == nil || !slices.Contains(res.LatestTags, "v1.5.0") {
			return fmt.Errorf("lastScanResult %+v does not show the push yet; logs in %s", res, s.Log(stack.Scan))
		}
		if res.TagCount != 3 || !slices.Equal(res.LatestTags, []string{"v2.0.0", "v1.5.0", "v1.0.0"}) {
			t.Fatalf("lastScanResult %+v, want the three valid tags", res)
		}
		if c := ready(repo); c.Status != metav1.ConditionTrue {
			t.Fatalf("repository Ready %s %q", c.Status, c.Message)
		}
		return nil
	})
	// Settled: nothing brings the planted tag back.
	time.Sleep(2 * time.Second)
	if p, err := s.Kube.Policies.Get(ctx, "default", "hostile-alphabetical"); err != nil || refTag(p.Status.LatestRef) != "v2.0.0" {
		t.Fatalf("policy %+v, %v; want latestRef v2.0.0", p.Status.LatestRef, err)
	}
}
