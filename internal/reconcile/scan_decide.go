package reconcile

import (
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
)

// scanStep is what a scan decision tells the scanner to do next: a read or write of the
// registry or the store, or, at the end, the status to record.
type scanStep int

const (
	// scanPrepare: open the registry session (registry.Client.Prepare).
	scanPrepare scanStep = iota + 1
	// scanHeld: ask the store which of the pushed tags (decision.tags) its list lacks
	// (store.Store.Missing).
	scanHeld
	// scanConfirm: confirm the pushed tags (decision.tags) with one HEAD each, in order, until
	// one is not confirmed.
	scanConfirm
	// scanPush: add the confirmed tags (decision.tags) to the held list at decision.from
	// (store.Store.Push).
	scanPush
	// scanList: list every tag (registry.Scan.ListTags).
	scanList
	// scanRecheck: confirm each of the pushed tags a listing missed (decision.tags).
	scanRecheck
	// scanPut: replace the stored list by decision.tags (store.Store.Put).
	scanPut
	// scanRecord: the tags are stored; announce them and record res (Scanner.record).
	scanRecord
	// scanFail: record the failure (statusWriter.fail).
	scanFail
)

// scanInput is what a scan decision is taken from: the repository as read, the request's hint,
// the registry's listing cost and exclusion list, and what the registry and the store answered
// so far.
type scanInput struct {
	repo *v1.ImageRepository
	hint *Hint
	// listingRequests is the number of requests a listing of that many tags costs
	// (registry.Client.ListingRequests).
	listingRequests func(tags int) int
	// excluded tells whether the exclusion list drops a tag (registry.Scan.Excluded); set with
	// known.prepared.
	excluded func(tag string) bool
	known    scanKnown
}

// scanKnown is what the registry and the store answered a scan so far; nil for a question not
// asked yet.
type scanKnown struct {
	// prepared is the outcome of opening the registry session.
	prepared *error
	held     *heldAnswer
	confirm  *confirmAnswer
	push     *pushAnswer
	list     *listAnswer
	// recheck are the tags that scanRecheck confirmed.
	recheck *[]string
	put     *putAnswer
}

// heldAnswer is the store's answer to scanHeld.
type heldAnswer struct {
	missing  []string
	revision string
	err      error
}

// confirmAnswer is the registry's answer to scanConfirm: the digests of the confirmed tags, or
// the first tag it did not confirm.
type confirmAnswer struct {
	digests     map[string]string
	unconfirmed string
}

// pushAnswer is the store's answer to scanPush.
type pushAnswer struct {
	pushed store.Pushed
	err    error
}

// listAnswer is the registry's answer to scanList.
type listAnswer struct {
	res registry.Result
	err error
}

// putAnswer is the store's answer to scanPut.
type putAnswer struct {
	entry   store.Entry
	written bool
	err     error
}

// scanDecision is what a scan does next (step with tags and from), or its end: what it stored,
// announces and records (res, out, status), or its failure (fail).
type scanDecision struct {
	step scanStep
	id   store.Identity
	tags []string
	from string
	// res and out are a stored scan's: what the store holds now and the outcome.
	res stored
	out ScanOutcome
	// status is the status a stored scan records.
	status scanStatus
	// fail is a failure's; storeFault tells that the tag store, not the repository, failed.
	fail       failure
	storeFault bool
}

// scanStatus is what the status of a successful scan records, besides the reconcile request.
type scanStatus struct {
	canonical string
	result    v1.ScanResult
	message   string
}

// announces tells whether the policies hear of the scan d: its tags changed, or pushed
// attachments refer to images they may wait for.
func (d scanDecision) announces() bool {
	return d.out.Changed || len(d.res.attached) > 0
}

// decideScan decides the next step of a scan of in.repo, or its end. With a hint whose pushed
// tags the stored list lacks and the last scan matched the spec, it confirms them one by one
// and adds them (the incremental path), unless a listing costs fewer requests; otherwise, or
// when the stored list is no base or a tag is not confirmed, it lists every tag, confirms the
// pushed tags the listing missed, and replaces the stored list. Either way the result names
// the images that pushed referrer and attachment tags refer to (attachedDigests).
func decideScan(in scanInput) scanDecision {
	repo, k := in.repo, in.known
	id, err := RepositoryIdentity(repo)
	if err != nil {
		return scanDecision{step: scanFail, fail: failure{v1.ImageURLInvalidReason, true, err}}
	}
	if k.prepared == nil {
		return scanDecision{step: scanPrepare, id: id}
	}
	if err := *k.prepared; err != nil {
		return scanDecision{step: scanFail, id: id, fail: failure{registry.Reason(err), registry.Stalled(err), err}}
	}
	key := StoreKey(repo.Namespace, repo.Name)
	var invalid registry.InvalidTags
	hint := validHint(in.hint, &invalid)
	// Taken before the hint loses the pushed tags that the stored list holds.
	attached := attachedDigests(hint)
	p := scanPath{in: in, id: id, invalid: invalid, attached: attached, listing: ListingRequested}
	incremental := hint != nil && len(hint.Tags) > 0 && specScanned(repo, id.Image)
	if incremental {
		// Pushed tags that the stored list holds cost no request: the notifications of a burst
		// trail its pushes, and a listing during the burst has seen many of them.
		if k.held == nil {
			return scanDecision{step: scanHeld, id: id, tags: hint.Tags}
		}
		switch err := k.held.err; {
		case err == nil:
			hint = &Hint{Tags: k.held.missing, More: hint.More}
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrCorrupt):
			// Also ErrOtherIdentity: a list taken for another object or spec is no base, nor
			// is a damaged one, which the listing's Put replaces.
			incremental, p.listing = false, ListingUnconfirmed
		default:
			return p.storeFailed(fmt.Errorf("reading the tags of %s: %w", key, err))
		}
	}
	// The pushed tags that a listing must show, whatever it is done for (see listed): the first
	// push of a repository is listed, and so is a push whose stored list is gone.
	if hint != nil {
		p.recheck = hint.Tags
	}
	if incremental && len(hint.Tags) > 0 && lists(in.listingRequests, hint, repo.Status.LastScanResult.TagCount) {
		incremental, p.listing = false, ListingCheaper
	}
	if incremental {
		if d, done := p.incremental(hint.Tags); done {
			return d
		}
	}
	return p.listAll()
}

// scanPath is a scan decision on its way: its input, what it found so far and why it lists.
type scanPath struct {
	in       scanInput
	id       store.Identity
	invalid  registry.InvalidTags
	attached []string
	listing  string
	recheck  []string
}

// incremental decides the incremental path for the pushed tags missing from the held list:
// confirm them, then add them. It reports false when every tag is to be listed instead, which
// it then says why (p.listing), having left out of p.recheck a tag the registry did not
// confirm: the listing alone tells whether it exists.
func (p *scanPath) incremental(missing []string) (scanDecision, bool) {
	k := p.in.known
	if k.confirm == nil {
		return scanDecision{step: scanConfirm, id: p.id, tags: p.toConfirm(missing)}, true
	}
	if u := k.confirm.unconfirmed; u != "" {
		p.recheck = slices.DeleteFunc(slices.Clone(p.recheck), func(tag string) bool { return tag == u })
		p.listing = ListingUnconfirmed
		return scanDecision{}, false
	}
	if k.push == nil {
		return scanDecision{step: scanPush, id: p.id, tags: p.toConfirm(missing), from: k.held.revision}, true
	}
	switch err := k.push.err; {
	case err == nil:
		pu := k.push.pushed
		res := stored{revision: pu.Revision, count: pu.Count, latest: pu.Latest, scanTime: pu.ScanTime,
			added: &pu, digests: k.confirm.digests, invalid: p.invalid, attached: p.attached}
		return p.record(res), true
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrCorrupt):
		// Also ErrOtherIdentity: the store holds no list of that identity to add to.
		p.listing = ListingUnconfirmed
		return scanDecision{}, false
	default:
		key := StoreKey(p.in.repo.Namespace, p.in.repo.Name)
		return p.storeFailed(fmt.Errorf("adding pushed tags to %s: %w", key, err)), true
	}
}

// toConfirm returns the pushed tags that the exclusion list keeps, without repeats, in order.
func (p *scanPath) toConfirm(tags []string) []string {
	var out []string
	for _, tag := range tags {
		if !p.in.excluded(tag) && !slices.Contains(out, tag) {
			out = append(out, tag)
		}
	}
	return out
}

// listAll decides the listing path: list every tag, confirm the pushed tags the listing missed
// (listed), replace the stored list.
func (p *scanPath) listAll() scanDecision {
	k := p.in.known
	if k.list == nil {
		return scanDecision{step: scanList, id: p.id}
	}
	res, err := k.list.res, k.list.err
	// A repository that the registry does not list yet may hold the pushed tags all the same.
	unlisted := registry.NotFound(err) && len(p.recheck) > 0
	if err != nil && !unlisted {
		return p.listingFailed(err)
	}
	p.invalid.Merge(res.Invalid)
	if k.recheck == nil {
		if missed := listingMissed(res, p.recheck, p.in.excluded); len(missed) > 0 {
			return scanDecision{step: scanRecheck, id: p.id, tags: missed}
		}
		k.recheck = new([]string)
	}
	tags := res.Tags
	for _, tag := range *k.recheck {
		if i, found := slices.BinarySearch(tags, tag); !found {
			tags = slices.Insert(slices.Clip(tags), i, tag)
		}
	}
	if unlisted && len(tags) == 0 {
		return p.listingFailed(err)
	}
	if k.put == nil {
		return scanDecision{step: scanPut, id: p.id, tags: tags}
	}
	if err := k.put.err; err != nil {
		key := StoreKey(p.in.repo.Namespace, p.in.repo.Name)
		return p.storeFailed(fmt.Errorf("storing the tags of %s: %w", key, err))
	}
	e := k.put.entry
	return p.record(stored{revision: e.Revision, count: len(e.Tags), latest: e.Tags[max(0, len(e.Tags)-store.TailTags):],
		scanTime: e.ScanTime, written: k.put.written, listing: p.listing, invalid: p.invalid, attached: p.attached})
}

// listingMissed returns the pushed tags that the listing res does not show and the exclusion
// list keeps, which the scan confirms itself. Some registries (CNCF distribution 2.8 among
// them) announce a push before their listing shows it, and the first push of a repository
// before they list the repository at all: res is then empty. A listing that misses more of
// them than it has pages is not racing a push: only that many, the latest, are confirmed, so
// that a payload naming tags the registry does not have costs a bounded number of requests.
func listingMissed(res registry.Result, pushed []string, excluded func(string) bool) []string {
	var missing []string
	for _, tag := range pushed {
		if _, found := slices.BinarySearch(res.Tags, tag); !found && !excluded(tag) {
			missing = append(missing, tag)
		}
	}
	return missing[max(0, len(missing)-max(res.Pages, 1)):]
}

// record is the end of a scan that stored res: the outcome, and the status to record.
func (p *scanPath) record(res stored) scanDecision {
	repo := p.in.repo
	return scanDecision{step: scanRecord, id: p.id, res: res, out: res.outcome(repo), status: scanStatus{
		canonical: p.id.Image,
		message:   scanMessage(res.count, res.invalid),
		result: v1.ScanResult{Revision: res.revision, TagCount: res.count, ScanTime: metav1.NewTime(res.scanTime),
			LatestTags: latestTags(res.latest)},
	}}
}

// listingFailed is the end of a scan whose listing failed: the repository's failure. The entry
// keeps the identity it was listed for, so evaluations of an edited repository wait for a
// successful scan rather than use it.
func (p *scanPath) listingFailed(err error) scanDecision {
	return scanDecision{step: scanFail, id: p.id, fail: failure{registry.Reason(err), registry.Stalled(err), err}}
}

// storeFailed is the end of a scan that could not read or store its tags: the status records
// it too, since no status may say a scan succeeded when its tags were not stored.
func (p *scanPath) storeFailed(err error) scanDecision {
	return scanDecision{step: scanFail, id: p.id, fail: failure{StoreReason(err), false, err}, storeFault: true}
}

// lists tells whether a scan with hint lists every tag of a repository of about count tags:
// without a hint, or when confirming its tags one by one costs more registry requests than a
// listing of them (cost, registry.Client.ListingRequests). Both ways also cost a ping.
func lists(cost func(tags int) int, hint *Hint, count int) bool {
	if hint == nil || len(hint.Tags) == 0 {
		return true
	}
	n := hint.pushed()
	return n > cost(count+n)
}

// specScanned tells whether the last successful scan matched the current spec, so that pushed
// tags may be added to its list instead of listing everything again.
func specScanned(repo *v1.ImageRepository, canonical string) bool {
	st := &repo.Status
	return st.LastScanResult != nil &&
		repo.Generation == st.ObservedGeneration &&
		canonical == st.CanonicalImageName &&
		slices.Equal(repo.GetExclusionList(), st.ObservedExclusionList)
}
