package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/trace"
)

// Dispatcher delivers a request for one object to a function.
type Dispatcher interface {
	Send(ctx context.Context, ceType, subject string, data any) error
}

// StoreKeys is the part of the tag store that a cron pass cleans up.
type StoreKeys interface {
	Keys(ctx context.Context) ([]string, error)
	Delete(ctx context.Context, key string) (bool, error)
}

// Pass is one run of the cron reconciler: it lists every ImageRepository and ImagePolicy, asks
// the due rules about each, and sends what is due to the scan and policy functions. It holds no
// state between passes; everything it needs is in the objects' status.
type Pass struct {
	Kube *kube.Client
	// Scan and Policy deliver requests to the functions.
	Scan, Policy Dispatcher
	// Store, when set, loses the entries of ImageRepositories that no longer exist.
	Store StoreKeys
	// Period is the time between passes: a pass answers for what became due since the last.
	Period time.Duration
	// StoreEvery is how often a pass reads the whole store, to find the repositories whose tags
	// are not stored and the entries of repositories that no longer exist; zero means every
	// pass. Reading the store takes it from the function that holds it, and a push that meets
	// the hand-over waits for it. A pass that lists an object reporting a store failure reads
	// the store whatever the period.
	StoreEvery time.Duration
	// Spread is the window over which dispatches are spread, so that objects due together do
	// not reach their registries in the same second.
	Spread time.Duration
	// Concurrency bounds the dispatches under way at once.
	Concurrency int
	// PageSize is the limit of each list call; zero means kube.DefaultPageSize.
	PageSize int64
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Log receives one line per failed dispatch; nil means slog.Default().
	Log *slog.Logger
}

// Summary counts what a pass did.
type Summary struct {
	Repositories, Policies  int
	Due, Dispatched, Failed int
	StoreDeleted            int
	// StoreRead tells whether the pass read the store's keys.
	StoreRead bool
	Duration  time.Duration
}

// counts names each count of the summary, as the cron metrics label them.
func (s Summary) counts() map[string]int {
	return map[string]int{
		"repositories": s.Repositories, "policies": s.Policies, "due": s.Due,
		"dispatched": s.Dispatched, "failed": s.Failed, "store_deleted": s.StoreDeleted,
	}
}

// LogValue renders the summary as one structured log line.
func (s Summary) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("repositories", s.Repositories), slog.Int("policies", s.Policies),
		slog.Int("due", s.Due), slog.Int("dispatched", s.Dispatched), slog.Int("failed", s.Failed),
		slog.Int("store_deleted", s.StoreDeleted), slog.Bool("store_read", s.StoreRead),
		slog.Duration("duration", s.Duration),
	)
}

type dispatch struct {
	to     Dispatcher
	ceType string
	ref    events.ObjectRef
	delay  time.Duration
}

// Run performs the pass and records it in the cron metrics. It returns an error only when it could not do its own job (the
// apiserver could not be listed); a function that refuses or is down is logged and counted,
// and its objects stay due for the next pass.
func (p *Pass) Run(ctx context.Context) (Summary, error) {
	sum, err := p.run(ctx)
	metrics.RecordCronPass(sum.counts(), sum.Duration, err)
	return sum, err
}

func (p *Pass) run(ctx context.Context) (Summary, error) {
	now, log := clock(p.Now), logger(p.Log)
	start := now()
	w := Window{Now: start, Period: p.Period}
	var sum Summary
	var work []dispatch

	// keys reads the store's keys at most once per pass. A store round reads them before the
	// listings, so that an entry missing from both is of a repository that no longer exists: a
	// repository that finds its tags not stored is scanned now, not at its interval (the store
	// was lost or emptied, or the object was migrated from Flux's controller), and the entries of
	// deleted repositories are removed. Between rounds only an object that reports a store
	// failure has the store read, to learn whether it answers again.
	keys := &storeKeys{store: p.Store, log: log}
	round := p.Store != nil && (p.StoreEvery <= 0 || crossed(w, p.StoreEvery, 0))
	if round {
		keys.read(ctx)
	}
	// live maps the store key of every ImageRepository to its tag revision; scannable holds
	// those that may be scanned and are not due already; scanned those whose status shows a
	// scan whose tags a store must hold (see unstored).
	live := map[string]string{}
	scannable, scanned := map[string]bool{}, map[string]bool{}
	err := p.listRepositories(ctx, func(r *v1.ImageRepository) {
		sum.Repositories++
		rev := "-"
		if r.Status.LastScanResult != nil {
			rev = r.Status.LastScanResult.Revision
		}
		key := StoreKey(r.Namespace, r.Name)
		live[key] = rev
		reason := RepositoryDue(r, w)
		if reason == "" && round && keys.answered() && !keys.has(key) && unstored(r) {
			reason = DueNotStored
		}
		if reason == "" && storeFailed(r.Status.Conditions) && keys.answers(ctx) {
			// The store answered this pass: the scan that it failed may succeed now.
			reason = DueStoreBack
		}
		if reason != "" {
			work = append(work, dispatch{to: p.Scan, ceType: events.TypeScanRequested,
				ref: events.ObjectRef{Namespace: r.Namespace, Name: r.Name, Reason: reason}})
		}
		scannable[key] = reason == "" && r.DeletionTimestamp.IsZero() && !r.Spec.Suspend
		scanned[key] = unstored(r)
	})
	if err != nil {
		return sum, fmt.Errorf("listing ImageRepositories: %w", err)
	}
	err = p.listPolicies(ctx, func(pol *v1.ImagePolicy) {
		sum.Policies++
		rev, exists := live[StoreKey(pol.RepositoryNamespace(), pol.Spec.ImageRepositoryRef.Name)]
		if rev == "-" {
			rev = ""
		}
		reason := PolicyDue(pol, rev, w)
		if reason == "" && !exists {
			reason = RepositoryGoneDue(pol)
		}
		if reason == "" && storeFailed(pol.Status.Conditions) && keys.answers(ctx) {
			reason = DueStoreBack
		}
		if reason != "" {
			work = append(work, dispatch{to: p.Policy, ceType: events.TypePolicyRequested,
				ref: events.ObjectRef{Namespace: pol.Namespace, Name: pol.Name, Reason: reason}})
		}
		// A policy that found its repository's stored tags damaged waits for a full listing,
		// which replaces them; only a scan can write, and none may be due. When the store was
		// rebuilt (by this pass's read or before it) the entry is gone, and a repository whose
		// status shows a scan is listed as a store round would list it.
		repoKey := StoreKey(pol.RepositoryNamespace(), pol.Spec.ImageRepositoryRef.Name)
		if scannable[repoKey] && readDamaged(pol.Status.Conditions) && keys.answers(ctx) {
			reason := DueStoreDamaged
			if !keys.has(repoKey) {
				reason = ""
				if scanned[repoKey] {
					reason = DueNotStored
				}
			}
			if reason != "" {
				scannable[repoKey] = false
				work = append(work, dispatch{to: p.Scan, ceType: events.TypeScanRequested,
					ref: events.ObjectRef{Namespace: pol.RepositoryNamespace(), Name: pol.Spec.ImageRepositoryRef.Name, Reason: reason}})
			}
		}
	})
	if err != nil {
		return sum, fmt.Errorf("listing ImagePolicies: %w", err)
	}
	sum.Due = len(work)
	sum.StoreRead = keys.answered()

	if round && keys.answered() {
		sum.StoreDeleted = p.cleanStore(ctx, keys.stored, live, log)
	}

	for i := range work {
		if p.Spread > 0 {
			work[i].delay = rand.N(p.Spread)
		}
	}
	sort.Slice(work, func(i, j int) bool { return work[i].delay < work[j].delay })
	// Delays count from the end of the listings, however long those took.
	sum.Dispatched, sum.Failed = p.send(ctx, now(), work, now, log)
	sum.Duration = now().Sub(start)
	return sum, nil
}

// send dispatches work, each item once its delay from start has passed, at most p.Concurrency
// at once. Once ctx ends nothing more is sent: neither the items still waiting for their delay
// nor those waiting for a free slot.
func (p *Pass) send(ctx context.Context, start time.Time, work []dispatch, now func() time.Time, log *slog.Logger) (ok, failed int) {
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(max(p.Concurrency, 1))
	for _, d := range work {
		if wait := start.Add(d.delay).Sub(now()); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		// A failed dispatch is counted and logged; it does not stop the others.
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil
			}
			// Each request starts a trace that the function's log lines continue.
			dctx := trace.With(ctx, trace.New())
			err := d.to.Send(dctx, d.ceType, d.ref.Namespace+"/"+d.ref.Name, d.ref)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				log.WarnContext(dctx, "dispatch failed", "type", d.ceType, "namespace", d.ref.Namespace,
					"name", d.ref.Name, "reason", d.ref.Reason, "error", err)
			} else {
				ok++
			}
			return nil
		})
	}
	_ = g.Wait()
	return ok, failed
}

// cleanStore deletes the store entries of ImageRepositories that the complete listing did not
// return. It runs only after both listings succeeded, so a partial view never deletes anything.
// storeKeys holds the store's keys once a pass has read them.
type storeKeys struct {
	store  StoreKeys
	log    *slog.Logger
	tried  bool
	stored map[string]bool
}

// read reads the keys, once; a failure is logged and leaves the keys unknown for the pass.
func (k *storeKeys) read(ctx context.Context) {
	if k.tried || k.store == nil {
		return
	}
	k.tried = true
	keys, err := k.store.Keys(ctx)
	if err != nil {
		k.log.Warn("listing store keys", "error", err)
		return
	}
	k.stored = make(map[string]bool, len(keys))
	for _, key := range keys {
		k.stored[key] = true
	}
}

// answers reads the keys if the pass has not tried yet, and tells whether the store answered.
func (k *storeKeys) answers(ctx context.Context) bool {
	k.read(ctx)
	return k.answered()
}

// answered tells whether the keys were read.
func (k *storeKeys) answered() bool { return k.stored != nil }

// has tells whether key is stored; false when the keys were not read.
func (k *storeKeys) has(key string) bool { return k.stored[key] }

func (p *Pass) cleanStore(ctx context.Context, stored map[string]bool, live map[string]string, log *slog.Logger) int {
	n := 0
	for k := range stored {
		if _, ok := live[k]; ok {
			continue
		}
		if _, err := p.Store.Delete(ctx, k); err != nil {
			log.Warn("deleting store entry", "key", k, "error", err)
			continue
		}
		n++
	}
	return n
}

func (p *Pass) listOptions() metav1.ListOptions {
	return metav1.ListOptions{Limit: p.PageSize}
}
