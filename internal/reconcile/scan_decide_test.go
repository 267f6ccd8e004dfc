package reconcile

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
)

// scanWorld stands for the registry and the store of scan decisions taken without I/O: the tags
// the registry has (with their digests), what its listing shows, and the list the store holds.
type scanWorld struct {
	// registry maps the tags the registry has to their digests; a HEAD of another tag fails.
	registry map[string]string
	// listing is what a listing answers when not nil (a registry whose listing trails its
	// pushes), else the tags of registry; listErr fails it.
	listing []string
	listErr error
	// stored is the stored list; storeErr fails the reads of it, pushErr and putErr its writes.
	stored                    []string
	storeErr, pushErr, putErr error
	prepareErr                error
	// steps lists the steps asked for, in order.
	steps []string
}

var scanStepNames = map[scanStep]string{scanPrepare: "prepare", scanHeld: "held", scanConfirm: "confirm",
	scanPush: "push", scanList: "list", scanRecheck: "recheck", scanPut: "put", scanRecord: "record", scanFail: "fail"}

// exclusions is Flux's default exclusion list, as the registry session compiles it.
var exclusions = regexp.MustCompile(`^.*\.sig$`)

// scan decides in as Scanner.decideTags does, answering each step from w.
func (w *scanWorld) scan(t *testing.T, in scanInput) scanDecision {
	t.Helper()
	scanTime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for range 10 {
		d := decideScan(in)
		w.steps = append(w.steps, scanStepNames[d.step])
		k := &in.known
		switch d.step {
		case scanRecord, scanFail:
			return d
		case scanPrepare:
			err := w.prepareErr
			k.prepared = &err
			in.excluded = exclusions.MatchString
		case scanHeld:
			var missing []string
			for _, tag := range d.tags {
				if !slices.Contains(w.stored, tag) && !slices.Contains(missing, tag) {
					missing = append(missing, tag)
				}
			}
			k.held = &heldAnswer{missing: missing, revision: store.RevisionOf(w.stored), err: w.storeErr}
		case scanConfirm:
			k.confirm = &confirmAnswer{digests: map[string]string{}}
			for _, tag := range d.tags {
				digest, ok := w.registry[tag]
				if !ok {
					k.confirm = &confirmAnswer{unconfirmed: tag}
					break
				}
				k.confirm.digests[tag] = digest
			}
		case scanPush:
			if d.from != store.RevisionOf(w.stored) {
				t.Fatalf("push onto revision %s, the store holds %s", d.from, store.RevisionOf(w.stored))
			}
			p := store.Pushed{From: d.from, ScanTime: scanTime, Identity: d.id}
			for _, tag := range d.tags {
				if !slices.Contains(w.stored, tag) {
					p.Tags = append(p.Tags, tag)
				}
			}
			if w.pushErr == nil {
				w.stored = slices.Sorted(slices.Values(append(slices.Clone(w.stored), p.Tags...)))
			}
			p.Revision, p.Count, p.Latest = store.RevisionOf(w.stored), len(w.stored), w.stored
			k.push = &pushAnswer{pushed: p, err: w.pushErr}
		case scanList:
			tags := w.listing
			if w.listErr != nil {
				// A listing that fails answers no tags.
				tags = []string{}
			}
			if tags == nil {
				for tag := range w.registry {
					if !exclusions.MatchString(tag) {
						tags = append(tags, tag)
					}
				}
			}
			k.list = &listAnswer{res: registry.Result{Tags: slices.Sorted(slices.Values(tags)), Pages: 1}, err: w.listErr}
		case scanRecheck:
			var confirmed []string
			for _, tag := range d.tags {
				if _, ok := w.registry[tag]; ok {
					confirmed = append(confirmed, tag)
				}
			}
			k.recheck = &confirmed
		case scanPut:
			written := !slices.Equal(w.stored, d.tags) || w.stored == nil
			if w.putErr == nil {
				w.stored = d.tags
			}
			e := store.Entry{Tags: d.tags, Revision: store.RevisionOf(d.tags), ScanTime: scanTime, Identity: d.id}
			k.put = &putAnswer{entry: e, written: written, err: w.putErr}
		}
	}
	t.Fatalf("no end after the steps %v", w.steps)
	return scanDecision{}
}

// scannedRepository is an ImageRepository whose last scan, of its current spec, found tags.
func scannedRepository(tags ...string) *v1.ImageRepository {
	repo := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-1", Generation: 2},
		Spec:       v1.ImageRepositorySpec{Image: "registry.example/app", ExclusionList: []string{`^.*\.sig$`}},
	}
	if tags != nil {
		repo.Status = v1.ImageRepositoryStatus{ObservedGeneration: 2, CanonicalImageName: "registry.example/app",
			ObservedExclusionList: []string{`^.*\.sig$`},
			LastScanResult:        &v1.ScanResult{Revision: store.RevisionOf(tags), TagCount: len(tags)}}
	}
	return repo
}

// TestDecideScan carries the decision cases of the scan's integration tests: which steps a scan
// takes for a request, what it stores, whether it announces, and the status or failure it
// records.
func TestDecideScan(t *testing.T) {
	notFound := &transport.Error{StatusCode: http.StatusNotFound, Errors: []transport.Diagnostic{{Code: "NAME_UNKNOWN"}}}
	unauthorized := &registry.Error{Reason: v1.AuthenticationFailedReason, Err: errors.New("UNAUTHORIZED")}
	sig := "sha256-" + strings.Repeat("a", 64)
	many := func(n int) []string {
		var tags []string
		for i := range n {
			tags = append(tags, fmt.Sprintf("2.%d.0", i))
		}
		return tags
	}
	for _, c := range []struct {
		name  string
		repo  *v1.ImageRepository
		hint  *Hint
		world scanWorld
		// steps are the steps taken, the end last; stored is the store's list afterwards.
		steps, stored string
		// want is the outcome; announces whether the policies hear of it.
		want      ScanOutcome
		announces bool
		delta     bool
		// status is the Ready message recorded, or the failure's cause.
		status string
	}{{
		name:  "first scan lists",
		repo:  scannedRepository(),
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "1.1.0": "d2", sig + ".sig": "d3"}},
		steps: "[prepare list put record]", stored: "[1.0.0 1.1.0]",
		want:      ScanOutcome{Listing: ListingRequested, Revision: store.RevisionOf([]string{"1.0.0", "1.1.0"}), TagCount: 2, Changed: true},
		announces: true, status: "successful scan: found 2 tags",
	}, {
		name:  "a push to a scanned repository is confirmed and added",
		repo:  scannedRepository("1.0.0", "1.1.0"),
		hint:  &Hint{Tags: []string{"1.2.0"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "1.1.0": "d2", "1.2.0": "d4"}, stored: []string{"1.0.0", "1.1.0"}},
		steps: "[prepare held confirm push record]", stored: "[1.0.0 1.1.0 1.2.0]",
		want:      ScanOutcome{Incremental: true, Revision: store.RevisionOf([]string{"1.0.0", "1.1.0", "1.2.0"}), TagCount: 3, Changed: true},
		announces: true, delta: true, status: "successful scan: found 3 tags",
	}, {
		name:  "a pushed tag the registry does not have is listed, and nothing changes",
		repo:  scannedRepository("1.0.0"),
		hint:  &Hint{Tags: []string{"9.9.9"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1"}, stored: []string{"1.0.0"}},
		steps: "[prepare held confirm list put record]", stored: "[1.0.0]",
		want:   ScanOutcome{Listing: ListingUnconfirmed, Revision: store.RevisionOf([]string{"1.0.0"}), TagCount: 1},
		status: "successful scan: found 1 tags",
	}, {
		name:  "the first push of a repository, listed before it shows the tag",
		repo:  scannedRepository(),
		hint:  &Hint{Tags: []string{"1.0.0"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1"}, listing: []string{}},
		steps: "[prepare list recheck put record]", stored: "[1.0.0]",
		want:      ScanOutcome{Listing: ListingRequested, Revision: store.RevisionOf([]string{"1.0.0"}), TagCount: 1, Changed: true},
		announces: true, status: "successful scan: found 1 tags",
	}, {
		name:  "the stored list is gone and the listing misses the pushed tag",
		repo:  scannedRepository("1.0.0"),
		hint:  &Hint{Tags: []string{"1.1.0"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "1.1.0": "d2"}, listing: []string{"1.0.0"}, storeErr: store.ErrNotFound},
		steps: "[prepare held list recheck put record]", stored: "[1.0.0 1.1.0]",
		want:      ScanOutcome{Listing: ListingUnconfirmed, Revision: store.RevisionOf([]string{"1.0.0", "1.1.0"}), TagCount: 2, Changed: true},
		announces: true, status: "successful scan: found 2 tags",
	}, {
		name:  "the first push of a repository the registry does not list yet",
		repo:  scannedRepository(),
		hint:  &Hint{Tags: []string{"0.1.0"}},
		world: scanWorld{registry: map[string]string{"0.1.0": "d1"}, listErr: notFound},
		steps: "[prepare list recheck put record]", stored: "[0.1.0]",
		want:      ScanOutcome{Listing: ListingRequested, Revision: store.RevisionOf([]string{"0.1.0"}), TagCount: 1, Changed: true},
		announces: true, status: "successful scan: found 1 tags",
	}, {
		name:  "a repository the registry does not know fails with the listing's error",
		repo:  scannedRepository(),
		hint:  &Hint{Tags: []string{"1.0.0", "2.0.0", "3.0.0"}},
		world: scanWorld{registry: map[string]string{}, listErr: notFound},
		steps: "[prepare list recheck fail]", stored: "[]",
		want:   ScanOutcome{Failure: v1.ReadOperationFailedReason},
		status: "NAME_UNKNOWN",
	}, {
		name:  "a pushed signature changes no list and names the signed image",
		repo:  scannedRepository("1.0.0"),
		hint:  &Hint{Tags: []string{sig + ".sig"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", sig + ".sig": "d2"}, stored: []string{"1.0.0"}},
		steps: "[prepare held confirm push record]", stored: "[1.0.0]",
		want:      ScanOutcome{Incremental: true, Revision: store.RevisionOf([]string{"1.0.0"}), TagCount: 1, Attached: 1},
		announces: true, status: "successful scan: found 1 tags",
	}, {
		name:  "pushed tags a listing costs fewer requests for are listed",
		repo:  scannedRepository("1.0.0"),
		hint:  &Hint{Tags: many(3)},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "2.0.0": "a", "2.1.0": "b", "2.2.0": "c"}, stored: []string{"1.0.0"}},
		steps: "[prepare held list put record]", stored: "[1.0.0 2.0.0 2.1.0 2.2.0]",
		want:      ScanOutcome{Listing: ListingCheaper, Revision: store.RevisionOf([]string{"1.0.0", "2.0.0", "2.1.0", "2.2.0"}), TagCount: 4, Changed: true},
		announces: true, status: "successful scan: found 4 tags",
	}, {
		name:  "a held list of another identity is no base to add to",
		repo:  scannedRepository("1.0.0"),
		hint:  &Hint{Tags: []string{"1.1.0"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "1.1.0": "d2"}, stored: []string{"1.0.0"}, pushErr: store.ErrNotFound},
		steps: "[prepare held confirm push list put record]", stored: "[1.0.0 1.1.0]",
		want:      ScanOutcome{Listing: ListingUnconfirmed, Revision: store.RevisionOf([]string{"1.0.0", "1.1.0"}), TagCount: 2, Changed: true},
		announces: true, status: "successful scan: found 2 tags",
	}, {
		name:  "an edited spec lists a push",
		repo:  func() *v1.ImageRepository { r := scannedRepository("1.0.0"); r.Generation = 3; return r }(),
		hint:  &Hint{Tags: []string{"1.1.0"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "1.1.0": "d2"}, stored: []string{"1.0.0"}},
		steps: "[prepare list put record]", stored: "[1.0.0 1.1.0]",
		want:      ScanOutcome{Listing: ListingRequested, Revision: store.RevisionOf([]string{"1.0.0", "1.1.0"}), TagCount: 2, Changed: true},
		announces: true, status: "successful scan: found 2 tags",
	}, {
		name:  "refused credentials keep what was stored",
		repo:  scannedRepository("1.0.0"),
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "2.0.0": "d2"}, stored: []string{"1.0.0"}, listErr: unauthorized},
		steps: "[prepare list fail]", stored: "[1.0.0]",
		want:   ScanOutcome{Failure: v1.AuthenticationFailedReason},
		status: "UNAUTHORIZED",
	}, {
		name:  "tags that could not be stored fail the scan",
		repo:  scannedRepository("1.0.0"),
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "1.1.0": "d2"}, stored: []string{"1.0.0"}, putErr: errors.New("read-only file system")},
		steps: "[prepare list put fail]", stored: "[1.0.0]",
		want:   ScanOutcome{Failure: v1.ReadOperationFailedReason},
		status: "storing the tags of ns/app: read-only file system",
	}, {
		name:  "a damaged store fails a push with the store's reason",
		repo:  scannedRepository("1.0.0"),
		hint:  &Hint{Tags: []string{"1.1.0"}},
		world: scanWorld{registry: map[string]string{"1.0.0": "d1", "1.1.0": "d2"}, stored: []string{"1.0.0"}, storeErr: store.ErrRebuilt},
		steps: "[prepare held fail]", stored: "[1.0.0]",
		want:   ScanOutcome{Failure: v1.TagStoreDamagedReason},
		status: "reading the tags of ns/app",
	}, {
		name:  "an image with a tag is stalled before the registry is asked",
		repo:  func() *v1.ImageRepository { r := scannedRepository(); r.Spec.Image += ":v1"; return r }(),
		steps: "[fail]", stored: "[]",
		want:   ScanOutcome{Failure: v1.ImageURLInvalidReason, Stalled: true},
		status: "should not contain a tag",
	}, {
		name:  "a session that cannot be opened is the registry's failure",
		repo:  scannedRepository(),
		world: scanWorld{prepareErr: &registry.Error{Reason: v1.UnsupportedProviderReason, Err: errors.New("provider aws")}},
		steps: "[prepare fail]", stored: "[]",
		want:   ScanOutcome{Failure: v1.UnsupportedProviderReason, Stalled: true},
		status: "provider aws",
	}} {
		t.Run(c.name, func(t *testing.T) {
			w := c.world
			d := w.scan(t, scanInput{repo: c.repo, hint: c.hint, listingRequests: registry.New().ListingRequests})
			if got := fmt.Sprint(w.steps); got != c.steps {
				t.Errorf("steps %s, want %s", got, c.steps)
			}
			if got := fmt.Sprint(w.stored); got != c.stored {
				t.Errorf("stored %s, want %s", got, c.stored)
			}
			if d.step == scanFail {
				out := ScanOutcome{Failure: d.fail.reason, Stalled: d.fail.stalled}
				if out != c.want || !strings.Contains(d.fail.cause.Error(), c.status) {
					t.Errorf("failure %+v (%v), want %+v (%s)", out, d.fail.cause, c.want, c.status)
				}
				return
			}
			d.out.InvalidTags = 0
			if d.out != c.want {
				t.Errorf("outcome %+v, want %+v", d.out, c.want)
			}
			if d.announces() != c.announces || (d.res.delta(d.id) != nil) != c.delta {
				t.Errorf("announces %v with delta %v, want %v, %v", d.announces(), d.res.delta(d.id), c.announces, c.delta)
			}
			st := d.status
			if st.message != c.status || st.canonical != "registry.example/app" || st.result.TagCount != c.want.TagCount ||
				st.result.Revision != c.want.Revision {
				t.Errorf("status %+v, want message %q", st, c.status)
			}
			if want := latestTags(w.stored); !slices.Equal(st.result.LatestTags, want) {
				t.Errorf("latest tags %v, want %v", st.result.LatestTags, want)
			}
		})
	}
}
