package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	utilclock "k8s.io/utils/clock"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/policy"
	"github.com/imagereflector/reflector/internal/reconcile/coalesce"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/trace"
)

// Hint is what a push event says about a repository: the tags it names. A scan with a hint may
// confirm those tags with one HEAD each and add them to the stored list instead of listing every
// tag; the registry is always asked, the payload is never trusted.
type Hint struct {
	Tags []string
	// More counts further pushed tags, earlier than Tags, that a merged hint did not keep.
	More int
}

// pushed is the number of tags the hint announces.
func (h *Hint) pushed() int {
	return len(h.Tags) + h.More
}

// ScanOutcome describes what a scan did.
type ScanOutcome struct {
	// Skipped says why nothing was scanned: the object is suspended or gone, or the request
	// joined a scan already running.
	Skipped string `json:"skipped,omitempty"`
	// Incremental tells that pushed tags were confirmed and added instead of a full listing.
	Incremental bool `json:"incremental,omitempty"`
	// Listing says why a scan listed every tag: one of the Listing* reasons.
	Listing string `json:"listing,omitempty"`
	// Revision and TagCount describe the stored tag list after the scan.
	Revision string `json:"revision,omitempty"`
	TagCount int    `json:"tagCount,omitempty"`
	// Changed tells that the tag list differs from the one the status reported before or from
	// the one stored; a stored list of another identity, or none, counts as different.
	Changed bool `json:"changed,omitempty"`
	// Failure is the reason of a failed scan, which the status records; Stalled tells that
	// only a spec change can cure it.
	Failure string `json:"failure,omitempty"`
	Stalled bool   `json:"stalled,omitempty"`
	// InvalidTags counts the tags, listed or pushed, that the scan left out because the tag
	// grammar does not allow them.
	InvalidTags int `json:"invalidTags,omitempty"`
	// Attached counts the images that pushed signature, attestation or referrer tags refer to,
	// which the scan announced (stored.attached).
	Attached int `json:"attached,omitempty"`
	// Finalized tells that the scan removed Flux's finalizer from a repository being deleted.
	Finalized bool `json:"finalized,omitempty"`
}

// Reasons for listing every tag, as ScanOutcome.Listing reports them.
const (
	// ListingRequested: the request named no tags, or the last scan is no base to add to (none,
	// or one of another spec).
	ListingRequested = "requested"
	// ListingCheaper: confirming the pushed tags one by one would cost more registry requests.
	ListingCheaper = "cheaper"
	// ListingUnconfirmed: a pushed tag could not be confirmed, or the stored list was no base.
	ListingUnconfirmed = "unconfirmed"
)

// Skip reasons.
const (
	SkippedSuspended = "suspended"
	SkippedDeleted   = "deleted"
	SkippedDeleting  = "being deleted"
	SkippedCoalesced = "coalesced into a running scan"
)

// RecordReserve is the time a scan keeps, past the ImageRepository's timeout that ends its
// registry work (registry.Scan), to record its outcome: to learn that its request's patch has
// returned and to write its status. A caller that bounds a scan with a deadline gives it the
// timeout plus RecordReserve, so that a registry that runs into the timeout is reported at once
// rather than by the next scan.
const RecordReserve = 5 * time.Second

// Scanner scans ImageRepositories into the tag store and their status: the work of the scan
// function. One Scanner serves a whole process; it runs at most one scan per repository at a
// time, and requests that arrive during a scan cause at most one more.
type Scanner struct {
	Kube     *kube.Client
	Registry *registry.Client
	Store    *store.Store
	// Sink receives a TagsChanged event whenever a scan changes a repository's tag list.
	Sink Dispatcher
	// Recorder receives Kubernetes Events; nil records none.
	Recorder *kube.Recorder
	// Clock is the one clock of the scans: the scan times their statuses record, their
	// durations, the moment a scan has its object (followUp.joinable) and the queue's waits; nil
	// means the real clock.
	Clock utilclock.WithTicker
	// Log receives one line per scan; nil means slog.Default().
	Log *slog.Logger
	// Repositories holds the watched copies that a scan beside its request's patch starts from
	// without a read; a copy it does not have yet is read from the apiserver.
	Repositories CachedRepositories

	queueOnce sync.Once
	queue     *coalesce.Queue[string, followUp]
}

// followUp is what the requests collected while a scan of a repository runs add up to: the
// follow-up scan that they cause.
type followUp struct {
	hint *Hint
	// trace is the trace of the latest request, which the follow-up scan continues.
	trace context.Context
	// read is when the running scan had its object; zero until it has. recorded is the latest
	// time at which a collected request's own reconcile-request patch was sent. See joinable.
	read, recorded time.Time
	// recs are the patches of collected requests that were still on their way when they were
	// collected (ScanRequest.Beside): the follow-up scan reads the object only once they returned, so
	// that it sees the requests it is to mark handled.
	recs []*Recording
}

// mergeFollowUp adds the request req to the follow-up f (some tells whether f collected any
// request yet): a full listing absorbs any hint (mergeHints), the latest request's trace is
// continued, and the times and patches add up. The running scan's read stays.
func mergeFollowUp(f followUp, some bool, req followUp) followUp {
	f.hint = mergeHints(some, f.hint, req.hint)
	f.trace = req.trace
	if req.recorded.After(f.recorded) {
		f.recorded = req.recorded
	}
	f.recs = append(f.recs, req.recs...)
	return f
}

// joinable tells whether a request may join the collected ones without recording its own: the
// follow-up scan has not started, and one of its requests was recorded by a patch sent after
// the running scan had its object. That patch reached the apiserver after the object the
// running scan works from was read, so the running scan does not mark its request handled, and
// the object keeps a request unhandled until a scan that starts later, the follow-up, handles
// it.
func (f followUp) joinable() bool {
	return !f.read.IsZero() && f.recorded.After(f.read)
}

// clock returns the Scanner's clock (Clock, else the real one).
func (s *Scanner) clock() utilclock.WithTicker {
	if s.Clock != nil {
		return s.Clock
	}
	return utilclock.RealClock{}
}

// scans returns the queue that runs one scan per repository at a time and coalesces the
// requests that arrive meanwhile.
func (s *Scanner) scans() *coalesce.Queue[string, followUp] {
	s.queueOnce.Do(func() {
		s.queue = coalesce.New[string](s.clock(), mergeFollowUp)
	})
	return s.queue
}

// ScanRequest is a request to scan an ImageRepository.
type ScanRequest struct {
	Namespace, Name string
	// Object, when not nil, is the object as the caller has just read or written it, which the
	// scan starts from instead of reading it again; a follow-up scan reads the object afresh.
	Object *v1.ImageRepository
	// Hint names the pushed tags that the scan may confirm and add; without one it lists every
	// tag.
	Hint *Hint
	// Beside, when not nil, is the request's reconcile-request patch, still on its way: the scan
	// reads the object, confirms and stores the pushed tags and announces them at once, and
	// writes the status only after the patch has returned (see Recording).
	Beside *Recording
}

// Scan scans the repository req names. When a scan of the same repository is running, the
// request is merged into one follow-up scan and Scan returns at once. A follow-up that lists
// pushed tags waits until requests stop arriving (see burstQuiet), so that a burst of pushes
// costs one listing.
func (s *Scanner) Scan(ctx context.Context, req ScanRequest) (ScanOutcome, error) {
	r := scanRequest{namespace: req.Namespace, name: req.Name, read: req.Object, hint: req.Hint, rec: req.Beside}
	if r.read != nil {
		r.namespace, r.name = r.read.Namespace, r.read.Name
	}
	if r.rec != nil {
		r.sent = r.rec.sent
	}
	return s.run(ctx, r)
}

// Join merges a request for namespace/name into the follow-up scan already collected for it,
// when a request recorded in the object after the running scan read it is among those collected
// (see followUp.joinable), and reports whether it did. A joined request needs no record of its
// own: the follow-up scan starts after the join, and when the process stops before it does, the
// request that the object still carries unhandled makes the cron reconciler scan. When Join
// reports false, the caller records the request and scans beside its patch (ScanRequest.Beside).
func (s *Scanner) Join(ctx context.Context, namespace, name string, hint *Hint) bool {
	if !s.scans().Join(StoreKey(namespace, name), followUp{hint: hint, trace: ctx}, followUp.joinable) {
		return false
	}
	logger(s.Log).InfoContext(ctx, "scan", "namespace", namespace, "name", name, "skipped", SkippedCoalesced)
	return true
}

// haveObject records that the running scan of key has its object, at a time no earlier than
// when it was read.
func (s *Scanner) haveObject(key string) {
	now := s.clock().Now()
	s.scans().With(key, func(f *followUp, _ bool) { f.read = now })
}

// recordedAt records that the patch rec of a request collected for key, sent at sent, has
// returned, while the follow-up it was collected for has not started.
func (s *Scanner) recordedAt(key string, rec *Recording, sent time.Time) {
	s.scans().With(key, func(f *followUp, _ bool) {
		if slices.Contains(f.recs, rec) && sent.After(f.recorded) {
			f.recorded = sent
		}
	})
}

// scanRequest is one request to scan namespace/name.
type scanRequest struct {
	namespace, name string
	// read, when not nil, is the object as the caller has just read or written it, which the
	// scan starts from.
	read *v1.ImageRepository
	hint *Hint
	// sent is when the request's own reconcile-request patch was sent, zero for a request that
	// did not record itself; rec, when not nil, is that patch, still on its way.
	sent time.Time
	rec  *Recording
}

// run scans as req asks, or merges req into the follow-up of a scan of the same repository
// that is running.
func (s *Scanner) run(ctx context.Context, req scanRequest) (ScanOutcome, error) {
	key := StoreKey(req.namespace, req.name)
	asked := followUp{hint: req.hint, trace: ctx}
	if req.rec != nil {
		asked.recs = []*Recording{req.rec}
	} else {
		asked.recorded = req.sent
	}
	if !s.scans().Request(key, asked) {
		if rec := req.rec; rec != nil {
			// A request whose patch is still on its way counts as recorded once the patch
			// has returned, before its sender hears of it.
			done, ok := rec.whenRecorded(func() { s.recordedAt(key, rec, req.sent) })
			if done && ok {
				s.recordedAt(key, rec, req.sent)
			}
		}
		logger(s.Log).InfoContext(ctx, "scan", "namespace", req.namespace, "name", req.name, "skipped", SkippedCoalesced)
		return ScanOutcome{Skipped: SkippedCoalesced}, nil
	}

	for {
		out, err := s.scan(ctx, req, key)
		req.read, req.rec = nil, nil
		// A follow-up that lists waits for the burst of pushes that it answers to end.
		var listing bool
		s.scans().With(key, func(f *followUp, some bool) {
			listing = some && f.hint != nil && lists(s.Registry.ListingRequests, f.hint, out.TagCount)
		})
		if listing && ctx.Err() == nil {
			s.scans().Settle(ctx, key, quietFor, burstWait)
		}
		if s.scans().Done(key, ctx.Err() != nil) {
			return out, err
		}
		s.awaitRecorded(ctx, key)
		next := s.scans().Take(key)
		req.hint = next.hint
		ctx = trace.Copy(ctx, next.trace)
	}
}

// awaitRecorded waits until the patches of the requests collected for key have returned, or ctx
// ends; requests collected while it waits are waited for too.
func (s *Scanner) awaitRecorded(ctx context.Context, key string) {
	for {
		var open *Recording
		s.scans().With(key, func(f *followUp, _ bool) {
			for _, r := range f.recs {
				if !r.finished() {
					open = r
					break
				}
			}
		})
		if open == nil {
			return
		}
		// The patch's own outcome does not matter here: the follow-up reads the object anyway.
		if open.wait(ctx); ctx.Err() != nil {
			return
		}
	}
}

// A follow-up scan that lists pushed tags, because that costs fewer requests than confirming
// them, waits for their pushes to end: until no request has arrived for a quiet period, or for
// at most burstWait after the first, and never beyond half the time its context has left.
// docker-registry sends its notifications one at a time, milliseconds apart (up to half a
// second under load), so a pipeline pushing many tags makes a stream of requests that one
// listing at its end answers. The quiet period is buildQuiet while the follow-up has collected
// at most burstTags tags, the few a build is pushed with, so that they are seen soon, and
// burstQuiet beyond. Tags pushed in a stream that never pauses that long are seen within
// burstWait. A follow-up that confirms tags one by one does not wait.
const (
	burstTags  = 16
	buildQuiet = 100 * time.Millisecond
	burstQuiet = 500 * time.Millisecond
	burstWait  = 30 * time.Second
)

// quietFor is how long a follow-up f waits for the next request before it starts (see burstQuiet).
func quietFor(f followUp) time.Duration {
	if f.hint == nil || f.hint.pushed() > burstTags {
		return burstQuiet
	}
	return buildQuiet
}

// MaxHintTags is the most pushed tags a hint remembers: beyond it, a listing costs fewer
// requests than confirming them one by one in any repository of up to 200,000 tags
// (registry.DefaultMaxTags) listed at 1,000 tags a page, and the hint keeps only the latest.
const MaxHintTags = 256

// mergeHints joins a waiting request with a new one: a full listing absorbs any hint. Of the
// tags, the latest MaxHintTags are kept and the others counted.
func mergeHints(waiting bool, a, b *Hint) *Hint {
	if !waiting {
		return b
	}
	if a == nil || b == nil || len(a.Tags) == 0 || len(b.Tags) == 0 {
		return nil
	}
	tags := slices.Clone(a.Tags)
	for _, t := range b.Tags {
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	more := a.More + b.More
	if drop := len(tags) - MaxHintTags; drop > 0 {
		tags, more = slices.Clone(tags[drop:]), more+drop
	}
	return &Hint{Tags: tags, More: more}
}

// scan runs one scan of req, the request of the running job of key in s.scans().
func (s *Scanner) scan(ctx context.Context, req scanRequest, key string) (out ScanOutcome, err error) {
	namespace, name, read, hint, rec := req.namespace, req.name, req.read, req.hint, req.rec
	now := s.clock().Now
	start := now()
	var repo *v1.ImageRepository
	// The steps are the times since the start at which the scan had its object, its registry
	// session, the stored list it adds pushed tags to, the pushed tags confirmed, its tags stored
	// and its request recorded: where a push's time goes.
	ctx = withSteps(ctx)
	defer func() {
		took := now().Sub(start)
		if repo != nil {
			metrics.RecordReconcile(metrics.Reconcile{Kind: metrics.KindImageRepository, Namespace: namespace,
				Name: name, Suspended: repo.Spec.Suspend, Deleting: !repo.DeletionTimestamp.IsZero(), Took: took})
		}
		err = s.logScan(ctx, req, took, out, err)
	}()

	repo, out, err = s.readRepository(ctx, namespace, name, read, rec)
	if repo == nil {
		return out, err
	}
	markStep(ctx, "read")
	if rec == nil {
		s.haveObject(key)
	} else if done, ok := rec.whenRecorded(func() { s.haveObject(key) }); done && ok {
		// The object whose request this scan marks handled is the one its patch returns: the
		// scan has it once the patch has returned (followUp.joinable).
		s.haveObject(key)
	}
	if !repo.DeletionTimestamp.IsZero() {
		return s.finalize(ctx, repo)
	}
	if repo.Spec.Suspend {
		return ScanOutcome{Skipped: SkippedSuspended}, s.status().acknowledge(ctx, repo)
	}
	// settle waits, for a scan that runs beside its request's patch, until the patch returned,
	// and returns the object the status is written against; nil means no status is to be
	// written (Scanner.recorded).
	settle := func() (*v1.ImageRepository, error) {
		if rec == nil {
			return repo, nil
		}
		return s.recorded(ctx, repo, hint, rec)
	}
	d := s.decideTags(ctx, repo, hint)
	if d.step == scanRecord {
		markStep(ctx, "stored")
		// The policies are evaluated from the store, or from the delta, and the repository's
		// spec, not its status: they hear of the new tags while the status is written.
		defer s.announce(ctx, repo, d)()
	}
	return s.apply(ctx, repo, d, settle)
}

// decideTags takes the decisions of a scan of repo with hint (decideScan) until one ends it,
// answering each step it asks for from the registry and the store.
func (s *Scanner) decideTags(ctx context.Context, repo *v1.ImageRepository, hint *Hint) scanDecision {
	key := StoreKey(repo.Namespace, repo.Name)
	in := scanInput{repo: repo, hint: hint, listingRequests: s.Registry.ListingRequests}
	var sc *registry.Scan
	defer func() {
		if sc != nil {
			sc.Close()
		}
	}()
	for {
		d := decideScan(in)
		switch d.step {
		case scanRecord, scanFail:
			return d
		case scanPrepare:
			var err error
			sc, err = s.Registry.Prepare(ctx, s.Kube, repo)
			in.known.prepared = &err
			if err == nil {
				in.excluded = sc.Excluded
				markStep(ctx, "prepared")
			}
		case scanHeld:
			// The store answers from the entry's header and markers, not its list.
			missing, held, err := s.Store.Missing(ctx, key, d.id, d.tags)
			if err == nil {
				markStep(ctx, "held")
			}
			in.known.held = &heldAnswer{missing: missing, revision: held, err: err}
		case scanConfirm:
			in.known.confirm = confirmPushed(ctx, sc, d.tags)
		case scanPush:
			// Neither reads the list: the store answers with the revision, the count and the
			// greatest tags (store.Store.Push).
			p, err := s.Store.Push(ctx, key, d.id, d.tags, d.from)
			in.known.push = &pushAnswer{pushed: p, err: err}
		case scanList:
			res, err := sc.ListTags(ctx)
			in.known.list = &listAnswer{res: res, err: err}
		case scanRecheck:
			var confirmed []string
			for _, tag := range d.tags {
				if _, err := sc.Confirm(ctx, tag); err == nil {
					confirmed = append(confirmed, tag)
				}
			}
			in.known.recheck = &confirmed
		case scanPut:
			e, written, err := s.Store.Put(ctx, key, d.id, d.tags, s.clock().Now())
			in.known.put = &putAnswer{entry: e, written: written, err: err}
		}
	}
}

// apply writes the status of the scan of repo that decided d, its one write: the scan result
// and Ready=True of a stored scan (record), Ready=False with the reason of a failed one (fail).
// settle first waits, for a scan beside its request's patch, for the patch, and moves the write
// onto the object it returned; when it reports false, nothing is written.
func (s *Scanner) apply(ctx context.Context, repo *v1.ImageRepository, d scanDecision, settle func() (*v1.ImageRepository, error)) (ScanOutcome, error) {
	out := d.out
	if d.step == scanFail {
		out = ScanOutcome{Failure: d.fail.reason, Stalled: d.fail.stalled}
	}
	recorded, err := settle()
	if recorded == nil {
		return out, err
	}
	if d.step == scanRecord {
		markStep(ctx, "recorded")
		return out, s.record(ctx, recorded, d)
	}
	_, err = s.status().fail(ctx, recorded, d.fail.reason, d.fail.stalled, failureMessage(d.fail.cause))
	if d.storeFault {
		err = errors.Join(d.fail.cause, err)
	}
	return out, err
}

// logScan logs the scan of req: what it found, how long it and its steps took, or its error,
// which it returns redacted for the callers that log it and answer with it.
func (s *Scanner) logScan(ctx context.Context, req scanRequest, took time.Duration, out ScanOutcome, err error) error {
	namespace, name, hint := req.namespace, req.name, req.hint
	attrs := []any{"namespace", namespace, "name", name, "duration", took}
	if out.Skipped != "" {
		attrs = append(attrs, "skipped", out.Skipped)
		if out.Finalized {
			attrs = append(attrs, "finalizer_removed", v1.ImageFinalizer)
		}
	} else {
		attrs = append(attrs, "incremental", out.Incremental, "revision", out.Revision,
			"tags", out.TagCount, "changed", out.Changed)
		if out.Listing != "" {
			attrs = append(attrs, "listing", out.Listing)
		}
		if hint != nil {
			attrs = append(attrs, "pushed", hint.pushed())
		}
		if out.InvalidTags > 0 {
			attrs = append(attrs, "invalid_tags", out.InvalidTags)
		}
		if out.Attached > 0 {
			attrs = append(attrs, "attached", out.Attached)
		}
	}
	if out.Failure != "" {
		attrs = append(attrs, "failure", out.Failure, "stalled", out.Stalled)
	}
	if st, ok := stepsAttr(ctx); ok {
		attrs = append(attrs, st)
	}
	if err != nil {
		err = redact.Error(err)
		logger(s.Log).ErrorContext(ctx, "scan", append(attrs, "error", err)...)
		return err
	}
	logger(s.Log).InfoContext(ctx, "scan", attrs...)
	return nil
}

// readRepository returns the ImageRepository to scan: read when the caller has it, else, for a
// scan beside its request's patch (rec), the watched copy (Repositories), else, and on a miss, a
// read from the apiserver. A repository that is gone loses its store entry and comes back nil,
// with the outcome that says so.
func (s *Scanner) readRepository(ctx context.Context, namespace, name string, read *v1.ImageRepository, rec *Recording) (*v1.ImageRepository, ScanOutcome, error) {
	got, err := read, error(nil)
	if got == nil && rec != nil && s.Repositories != nil {
		// A scan beside its request's patch starts from the watched copy: a read waits in etcd
		// behind the patch and the writes of other pushes, on a push's way to latestRef. A copy
		// from before an edit is harmless: the status is written against the object the patch
		// returns, only when it is the one scanned (Scanner.recorded), and the policies advance
		// by a delta only for the identity they read themselves.
		got, _ = s.Repositories.Get(namespace, name)
	}
	if got == nil {
		// Without a copy, such as for an object created a moment ago, the apiserver answers.
		got, err = s.Kube.Repositories.Get(ctx, namespace, name)
	}
	key := StoreKey(namespace, name)
	if apierrors.IsNotFound(err) {
		// The store is a cache of live objects: a deleted repository loses its entry.
		metrics.ForgetRepository(namespace, name)
		removed, err := s.Store.Delete(ctx, key)
		if err != nil {
			return nil, ScanOutcome{Skipped: SkippedDeleted}, err
		}
		if removed {
			s.announceDeleted(ctx, namespace, name)
		}
		return nil, ScanOutcome{Skipped: SkippedDeleted}, nil
	}
	if err != nil {
		return nil, ScanOutcome{}, fmt.Errorf("reading ImageRepository %s: %w", key, err)
	}
	return got, ScanOutcome{}, nil
}

// recorded waits for the reconcile-request patch of a scan that ran beside it and returns the
// object as the patch returned it, which the status is written against, or nil when the status
// must not be written: the patch failed (the error), or the object is no longer the one scanned
// (recreated, or its spec edited), in which case a follow-up scan is collected.
func (s *Scanner) recorded(ctx context.Context, scanned *v1.ImageRepository, hint *Hint, rec *Recording) (*v1.ImageRepository, error) {
	got, err := rec.wait(ctx)
	if err != nil {
		// The tags are stored and announced; the request, if recorded after all, is scanned
		// again by the cron reconciler.
		return nil, fmt.Errorf("recording the scan request of ImageRepository %s/%s: %w", scanned.Namespace, scanned.Name, err)
	}
	if got.UID != scanned.UID || got.Generation != scanned.Generation {
		s.scans().Request(StoreKey(scanned.Namespace, scanned.Name), followUp{hint: hint, trace: ctx})
		return nil, nil
	}
	return got, nil
}

// stored is what a scan left in the tag store.
type stored struct {
	// revision, count and latest are the entry's revision, how many tags it holds and its
	// greatest tags (at most store.TailTags, ascending), scanTime when a listing last wrote it:
	// what the status shows, which a push learns without reading the list.
	revision string
	count    int
	latest   []string
	scanTime time.Time
	// written tells that a listing replaced the entry's list or identity (store.Store.Put).
	written bool
	// listing is why every tag was listed; empty for the incremental path.
	listing string
	// added is the incremental path's addition, and digests the digests its tags were
	// confirmed with; added is nil after a listing.
	added   *store.Pushed
	digests map[string]string
	// invalid counts the pushed and listed tags left out for the tag grammar.
	invalid registry.InvalidTags
	// attached are the digests that the pushed referrer and attachment tags refer to
	// (attachedDigests).
	attached []string
}

// outcome is the ScanOutcome of a scan that stored res, for repo as read.
func (res stored) outcome(repo *v1.ImageRepository) ScanOutcome {
	prev := ""
	if repo.Status.LastScanResult != nil {
		prev = repo.Status.LastScanResult.Revision
	}
	// A list that replaced none, or one of another identity, is news to the policies even with
	// the revision the status shows: they are waiting for it.
	out := ScanOutcome{Incremental: res.listing == "", Listing: res.listing, Revision: res.revision,
		TagCount: res.count, Changed: res.revision != prev || res.written,
		InvalidTags: res.invalid.Count, Attached: len(res.attached)}
	return out
}

// announce tells the policies that the tags of repo changed, in the background: the TagsChanged
// event carries the delta of an incremental scan, signed with the store's key, so that the
// policy function can apply it without opening the store. The returned function waits for the
// delivery.
func (s *Scanner) announce(ctx context.Context, repo *v1.ImageRepository, d scanDecision) (wait func()) {
	if !d.announces() || s.Sink == nil {
		return func() {}
	}
	res, id := d.res, d.id
	data := events.TagsChanged{Namespace: repo.Namespace, Name: repo.Name, Revision: res.revision,
		Attached: res.attached}
	if d := res.delta(id); d != nil {
		data.Delta = d
		if key, err := s.Store.ProofKey(false); err != nil || data.Sign(key) != nil {
			// Unsigned, the event is only a trigger: the policies read the store.
			logger(s.Log).WarnContext(ctx, "signing the tags a scan added", "namespace", repo.Namespace, "name", repo.Name, "error", err)
			data.Delta = nil
		}
	}
	var announced sync.WaitGroup
	announced.Go(func() {
		if err := s.Sink.Send(ctx, events.TypeTagsChanged, StoreKey(repo.Namespace, repo.Name), data); err != nil {
			// The cron reconciler re-evaluates policies that missed this.
			logger(s.Log).WarnContext(ctx, "announcing changed tags", "namespace", repo.Namespace, "name", repo.Name, "error", err)
		}
	})
	return announced.Wait
}

// attachedDigests returns the digests that the referrer and attachment tags among the pushed
// tags of hint refer to (policy.ReferredDigest), sorted, at most events.MaxAttached of the
// latest pushed. The exclusion list and the stored list do not matter: Flux's default
// exclusionList drops cosign's .sig tags, and a second referrer of an image on a registry
// without the referrers API rewrites the referrers tag already stored, yet either may be the
// signature that a verifying policy waits for. The tags are not confirmed: the event is a
// trigger for the policy function, which asks the registry for the signatures themselves.
func attachedDigests(hint *Hint) []string {
	if hint == nil {
		return nil
	}
	var out []string
	for i := len(hint.Tags) - 1; i >= 0 && len(out) < events.MaxAttached; i-- {
		if d, ok := policy.ReferredDigest(hint.Tags[i]); ok && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// announceDeleted tells the policies of a repository whose entry a scan removed, because the
// repository is gone, that its tags changed: they are evaluated again and report the missing
// repository (Ready=False, DependencyNotReady, latestRef kept), as Flux's policies do when their
// repository is deleted. The entry was there, so this happens once per deletion.
func (s *Scanner) announceDeleted(ctx context.Context, namespace, name string) {
	if s.Sink == nil {
		return
	}
	data := events.TagsChanged{Namespace: namespace, Name: name}
	if err := s.Sink.Send(ctx, events.TypeTagsChanged, StoreKey(namespace, name), data); err != nil {
		logger(s.Log).WarnContext(ctx, "announcing a deleted repository", "namespace", namespace, "name", name, "error", err)
	}
}

// delta is the addition res made for identity id, as a TagsChanged event carries it, or nil when
// it made none that fits one: a listing, no new tag, or more tags than an event carries.
func (res stored) delta(id store.Identity) *events.TagsDelta {
	a := res.added
	if a == nil || len(a.Tags) == 0 || len(a.Tags) > events.MaxDeltaTags || a.From == "" {
		return nil
	}
	d := &events.TagsDelta{UID: id.UID, Image: id.Image, Listing: id.Listing, From: a.From}
	for _, tag := range a.Tags {
		d.Added = append(d.Added, events.AddedTag{Tag: tag, Digest: res.digests[tag]})
	}
	return d
}

// record writes the status of a scan of repo that decided d: the scan result, the reconcile
// request repo carries as handled, and Ready=True. The tags are stored and announced: the status
// records them even when the caller has given up since, as the evaluator's and a failure's
// writes do.
func (s *Scanner) record(ctx context.Context, repo *v1.ImageRepository, d scanDecision) error {
	token, _ := kube.ReconcileRequest(repo.Annotations)
	st := d.status
	wctx, cancel := writeContext(ctx)
	defer cancel()
	updated, err := s.status().write(wctx, repo, func(r *v1.ImageRepository) error {
		r.Status.ObservedGeneration = repo.Generation
		r.Status.CanonicalImageName = st.canonical
		r.Status.ObservedExclusionList = slices.Clone(repo.GetExclusionList())
		result := st.result
		result.LatestTags = slices.Clone(result.LatestTags)
		r.Status.LastScanResult = &result
		if token != "" {
			r.Status.LastHandledReconcileAt = token
		}
		markSucceeded(&r.Status.Conditions, repo.Generation, st.message)
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing the status of ImageRepository %s/%s: %w", repo.Namespace, repo.Name, err)
	}
	metrics.SetRepositoryTags(repo.Namespace, repo.Name, st.result.TagCount)
	// As Flux does, a scan is news when it found other tags or ended a failure.
	if d.out.Changed || !apimeta.IsStatusConditionTrue(repo.Status.Conditions, v1.ReadyCondition) {
		s.Recorder.Normal(updated, v1.SucceededReason, st.message)
	}
	return nil
}

// finalize cleans up after a repository being deleted, suspended or not: its tags leave the
// store, and then Flux's finalizer, which reflector never adds but finds on objects that Flux's
// controller reconciled, is removed so that the deletion completes. Other finalizers are left to
// their owners. The entry goes only when it was listed for this object: once another process
// has removed the finalizer, a successor of the same name may be scanned before this runs.
func (s *Scanner) finalize(ctx context.Context, repo *v1.ImageRepository) (ScanOutcome, error) {
	out := ScanOutcome{Skipped: SkippedDeleting}
	key := StoreKey(repo.Namespace, repo.Name)
	if _, err := s.Store.DeleteFor(ctx, key, string(repo.UID)); err != nil {
		return out, fmt.Errorf("deleting the tags of ImageRepository %s: %w", key, err)
	}
	metrics.ForgetRepository(repo.Namespace, repo.Name)
	// The tags are gone: the finalizer goes too, even when the caller has given up since.
	wctx, cancel := writeContext(ctx)
	defer cancel()
	removed, err := s.Kube.Repositories.RemoveFinalizer(wctx, repo, v1.ImageFinalizer)
	if err != nil {
		return out, fmt.Errorf("removing the finalizer %s of ImageRepository %s: %w", v1.ImageFinalizer, key, err)
	}
	out.Finalized = removed
	return out, nil
}

// confirmPushed confirms the pushed tags (registry.Scan.Confirm), in order, and answers with
// the digests they were confirmed with. It stops at the first tag that the registry does not
// confirm, which the answer names: a full listing is done instead.
func confirmPushed(ctx context.Context, sc *registry.Scan, tags []string) *confirmAnswer {
	digests := map[string]string{}
	for _, tag := range tags {
		digest, err := sc.Confirm(ctx, tag)
		if err != nil {
			return &confirmAnswer{unconfirmed: tag}
		}
		digests[tag] = digest
	}
	markStep(ctx, "confirmed")
	return &confirmAnswer{digests: digests}
}

// status writes ImageRepository status.
func (s *Scanner) status() statusWriter[*v1.ImageRepository] {
	return statusWriter[*v1.ImageRepository]{objects: s.Kube.Repositories, fields: repositoryFields, recorder: s.Recorder}
}

// latestTags returns the status sample of an ascending tag list: its last ten, greatest first.
// A tag outside the grammar, which a store written before scans left such tags out may hold,
// is not shown.
func latestTags(ascending []string) []string {
	out := make([]string, 0, min(len(ascending), 10))
	for i := len(ascending) - 1; i >= 0 && len(out) < 10; i-- {
		if imagename.ValidTag(ascending[i]) {
			out = append(out, ascending[i])
		}
	}
	return out
}
