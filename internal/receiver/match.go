package receiver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/webhook"
)

// target is one ImageRepository that a delivery is about, with the tags it names.
type target struct {
	namespace, name string
	timeout         time.Duration
	// tags are the pushed tags; full means some event named none, so only a full listing
	// answers it.
	tags []string
	full bool
}

func (t target) object() Object { return Object{Namespace: t.namespace, Name: t.name} }

func (t target) hint() *reconcile.Hint {
	if t.full || len(t.tags) == 0 {
		return nil
	}
	return &reconcile.Hint{Tags: t.tags}
}

// match finds the ImageRepositories of namespace ("" for all) whose image has the key of one
// of evs, in list order, from the catalog. Suspended repositories are left out: they are not
// scanned, so a request for them would only wait for their resumption, which requests a scan
// by itself.
func (r *Receiver) match(ctx context.Context, namespace string, evs []webhook.Event) ([]target, error) {
	wanted := map[string][]webhook.Event{}
	for _, e := range evs {
		wanted[e.Key()] = append(wanted[e.Key()], e)
	}
	pick := func(repos []repoEntry) []target {
		var out []target
		for _, e := range repos {
			// An invalid spec.image has no key; the repository's own scan reports it.
			if matched, ok := wanted[e.key]; ok && e.key != "" && !e.suspended {
				out = append(out, newTarget(e, matched))
			}
		}
		return out
	}
	repos, copies, err := r.repos.find(ctx, namespace, false)
	if err != nil {
		return nil, err
	}
	if out := pick(repos); len(out) > 0 || !copies {
		return out, nil
	}
	// Nothing matched the watched copies: ask the apiserver before answering so.
	if repos, _, err = r.repos.find(ctx, namespace, true); err != nil {
		return nil, err
	}
	return pick(repos), nil
}

func newTarget(repo repoEntry, evs []webhook.Event) target {
	t := target{namespace: repo.namespace, name: repo.name, timeout: repo.timeout}
	seen := map[string]bool{}
	for _, e := range evs {
		switch {
		case e.Tag == "":
			t.full = true
		case !seen[e.Tag]:
			seen[e.Tag] = true
			t.tags = append(t.tags, e.Tag)
		}
		if len(t.tags) > reconcile.MaxHintTags {
			t.full, t.tags = true, nil
			break
		}
	}
	return t
}

// annotateConcurrency bounds the annotation patches of one delivery under way at once.
const annotateConcurrency = 8

// annotate sets the reconcile-request annotation on each target: the commit point. The
// patches run concurrently, because the sender waits for all of them. It returns the targets
// annotated, in order, and the first error; it goes on after an error so that every object it
// can reach carries the request.
func (r *Receiver) annotate(ctx context.Context, targets []target, recs []*reconcile.Recording) ([]target, error) {
	token := reconcile.PushRequestToken(r.cfg.now())
	errs := make([]error, len(targets))
	gone := make([]bool, len(targets))
	var g errgroup.Group
	g.SetLimit(annotateConcurrency)
	for i, t := range targets {
		g.Go(func() error {
			annotated, err := r.kube.Repositories.RequestReconcile(ctx, t.namespace, t.name, token)
			if err != nil {
				annotated = nil
			}
			// The scan beside it writes its status against the object as the patch returned it.
			recs[i].Finish(annotated, err)
			switch {
			case apierrors.IsNotFound(err):
				// Deleted since the listing: there is nothing to scan.
				gone[i] = true
			case err != nil:
				errs[i] = fmt.Errorf("annotating ImageRepository %s/%s: %w", t.namespace, t.name, err)
			}
			// Every patch is tried whatever the others' outcome: errors are kept per target.
			return nil
		})
	}
	_ = g.Wait()
	var (
		done  []target
		first error
	)
	for i, t := range targets {
		if gone[i] {
			continue
		}
		if errs[i] != nil {
			if first == nil {
				first = errs[i]
			}
			continue
		}
		done = append(done, t)
	}
	return done, first
}

// objects returns the names of targets for an answer or a log line.
func objects(targets []target) []Object {
	out := make([]Object, len(targets))
	for i, t := range targets {
		out[i] = t.object()
	}
	return out
}

// objectNames renders targets as namespace/name for a log line.
func objectNames(targets []target) string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.namespace + "/" + t.name
	}
	return strings.Join(names, ",")
}

// bodyKey is what an HTTP delivery is remembered by: a hash of its body, which is what a
// signature covers (and what a token-authenticated sender sent), scoped by receiver so that one
// receiver's deliveries do not shadow another's. A replay with new unsigned headers (a new
// X-GitHub-Delivery, say) has the same key. Its size is fixed whatever the sender sent.
func bodyKey(scope string, body []byte) string {
	sum := sha256.Sum256(body)
	return scope + "\x00" + string(sum[:])
}

// idKey is what a delivery of a provider whose events carry the sender's own ids
// (webhook.DedupByID) is remembered by: the set of those ids, hashed, scoped by receiver as
// bodyKey is. A retry that carries the same events in another body (another batch, other
// whitespace) has the same key.
func idKey(scope string, evs []webhook.Event) string {
	ids := make([]string, 0, len(evs))
	for _, e := range evs {
		ids = append(ids, e.DeliveryID)
	}
	slices.Sort(ids)
	h := sha256.New()
	for _, id := range slices.Compact(ids) {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return scope + "\x00id\x00" + string(h.Sum(nil))
}

// eventKey is what a CloudEvent is remembered by: its sender, source and id (a source and id
// identify an event; the sender scopes them, so that no sender can claim another's ids), hashed
// to a fixed size.
func eventKey(sender, source, id string) string {
	h := sha256.New()
	for _, s := range []string{sender, source, id} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return string(h.Sum(nil))
}

// maxShownIDLength bounds the delivery id that answers and log lines repeat.
const maxShownIDLength = 128

// deliveryID renders the delivery ids of evs for an answer or a log line: the first one, and
// how many others there are, at most maxShownIDLength bytes of it.
func deliveryID(evs []webhook.Event) string {
	var first string
	others := 0
	seen := map[string]bool{}
	for _, e := range evs {
		if e.DeliveryID == "" || seen[e.DeliveryID] {
			continue
		}
		seen[e.DeliveryID] = true
		if first == "" {
			first = e.DeliveryID
		} else {
			others++
		}
	}
	if len(first) > maxShownIDLength {
		first = strings.ToValidUTF8(first[:maxShownIDLength], "") + "..."
	}
	if others > 0 {
		first += fmt.Sprintf(" (+%d)", others)
	}
	return first
}
