package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/tokenreview"
	"github.com/imagereflector/reflector/internal/trace"
	"github.com/imagereflector/reflector/internal/webhook"
)

// cloudEventProvider is the provider label of registry pushes that arrive as CloudEvents.
const cloudEventProvider = "cloudevent"

// CloudEvents returns the handler of the broker path, serving binary and structured mode
// through events.Handler. Each event's sender is the ServiceAccount whose token a
// tokenreview.Verifier in front of it accepted, else the request's remote address.
func (r *Receiver) CloudEvents() http.Handler {
	h := events.Handler(r.HandleCloudEvent)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sender, ok := tokenreview.Sender(req.Context())
		if !ok {
			sender = remoteHost(req.RemoteAddr)
		}
		h.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), senderKey{}, sender)))
	})
}

// RepositoryEvents returns the handler of the ApiServerSource's ImageRepository events alone
// (add, update and delete, which HandleCloudEvent handles as on the broker path); an event of any
// other type is refused (400, events.ErrRejected) and changes nothing. The public surface serves
// it behind a tokenreview.Verifier: the Broker delivers those events there, to the pod that is
// already running whenever reflector itself writes an ImageRepository, and scan requests and
// registry pushes stay on the cluster-local surface.
func (r *Receiver) RepositoryEvents() http.Handler {
	return events.Handler(func(ctx context.Context, e cloudevents.Event) error {
		switch e.Type() {
		case events.TypeAPIServerAdd, events.TypeAPIServerUpdate, events.TypeAPIServerDelete:
			return r.HandleCloudEvent(ctx, e)
		}
		r.logger().LogAttrs(ctx, slog.LevelWarn, "cloudevent",
			slog.String("type", events.Brief(e.Type())), slog.String("source", e.Source()), slog.String("id", e.ID()),
			slog.String("result", "rejected: only ImageRepository events are served here"))
		return fmt.Errorf("%w: type %s is not served on this path", events.ErrRejected, events.Brief(e.Type()))
	})
}

type senderKey struct{}

// senderOf returns the sender that CloudEvents found for the request of ctx, "" for an event
// handed to HandleCloudEvent directly.
func senderOf(ctx context.Context) string {
	s, _ := ctx.Value(senderKey{}).(string)
	return s
}

// HandleCloudEvent handles one CloudEvent:
//
//   - events.TypeScanRequested (from the cron reconciler): the scan runs before the answer.
//     A scan that fails on the registry is recorded in the object's status and acknowledged;
//     only an error of the scanner itself (the API server, the store) is returned, so that the
//     broker redelivers.
//   - ApiServerSource add and update of an ImageRepository: scanned when reconcile.RepositoryDue
//     says so; the update that a scan's own status write causes is not due. A delete removes
//     the repository's tags from the store.
//   - registry pushes (CDEvents, Event Grid, Eventarc): matched in every namespace, annotated,
//     and scanned in the background, as a webhook is, under the same bounds: each sender (see
//     CloudEvents) has the token bucket a webhook receiver has (WithRateLimit; over it the
//     error wraps events.ErrTooMany), and an event is remembered for the dedup window by its
//     sender, source and id, so that a sender can neither replay another's event nor push
//     the webhooks' deliveries out of memory.
//
// Other types are acknowledged and logged. An error wrapping events.ErrRejected marks an
// event that no redelivery can fix.
//
// The work runs in the trace of ctx, or of a new one when ctx carries none.
func (r *Receiver) HandleCloudEvent(ctx context.Context, e cloudevents.Event) error {
	start := time.Now()
	ctx = trace.Ensure(ctx)
	res, err := r.handleCloudEvent(ctx, e)
	// The error is logged and becomes the answer's body.
	err = redact.Error(err)
	attrs := []slog.Attr{
		slog.String("type", e.Type()),
		slog.String("source", e.Source()),
		slog.String("id", e.ID()),
		slog.String("result", res.message),
		slog.String("objects", objectNames(res.recorded())),
		slog.Duration("duration", time.Since(start)),
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
		if errors.Is(err, events.ErrRejected) {
			level = slog.LevelWarn
		}
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	r.logger().LogAttrs(ctx, level, "cloudevent", attrs...)
	return err
}

func (r *Receiver) handleCloudEvent(ctx context.Context, e cloudevents.Event) (result, error) {
	switch t := e.Type(); {
	case t == events.TypeScanRequested:
		return r.scanRequested(ctx, e)
	case t == events.TypeAPIServerAdd || t == events.TypeAPIServerUpdate:
		return r.apiServerEvent(ctx, e)
	case t == events.TypeAPIServerDelete:
		return r.apiServerDelete(ctx, e)
	}
	sender := senderOf(ctx)
	if !r.senders.take(sender) {
		metrics.RecordWebhook(cloudEventProvider, metrics.WebhookRateLimited)
		return result{message: "rate limited"}, fmt.Errorf("%w: registry pushes over the sender's rate; retry later", events.ErrTooMany)
	}
	evs, err := webhook.ParseCloudEvent(e.Type(), e.Source(), e.ID(), e.Data())
	switch {
	case errors.Is(err, webhook.ErrIgnored):
		metrics.RecordWebhook(cloudEventProvider, metrics.WebhookIgnored)
		return result{message: "ignored: " + err.Error()}, nil
	case err != nil:
		metrics.RecordWebhook(cloudEventProvider, metrics.WebhookRejected)
		return result{message: "rejected"}, fmt.Errorf("%w: %v", events.ErrRejected, err)
	}
	res := r.deliver(ctx, r.seenEvents, eventKey(sender, e.Source(), e.ID()), "", evs)
	metrics.RecordWebhook(cloudEventProvider, res.outcome())
	if res.err != nil {
		return res, res.err
	}
	return res, nil
}

// scanRequested scans the object a TypeScanRequested event names, synchronously: the cron
// reconciler bounds its dispatches by the answers.
func (r *Receiver) scanRequested(ctx context.Context, e cloudevents.Event) (result, error) {
	var ref events.ObjectRef
	if err := events.Decode(e, &ref); err != nil {
		return result{message: "rejected"}, err
	}
	if err := events.CheckObject(ref.Namespace, ref.Name); err != nil {
		return result{message: "rejected"}, fmt.Errorf("%s %s: %w", e.Type(), e.ID(), err)
	}
	return r.scanNow(ctx, ref.Namespace, ref.Name, nil, events.Brief(ref.Reason))
}

// scanNow scans namespace/name and waits for the outcome; from read, when it is the object as
// just read.
func (r *Receiver) scanNow(ctx context.Context, namespace, name string, read *v1.ImageRepository, why string) (result, error) {
	// The scan runs to its own deadline (the ImageRepository's spec.timeout, which the scanner
	// applies) whoever asked for it: a sender that stops waiting, such as the cron reconciler's
	// request timing out, must not cut it off before its outcome is written. Shutdown still
	// cancels it.
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return result{message: "not scanned: shutting down"}, fmt.Errorf("scanning ImageRepository %s/%s: the function is shutting down", namespace, name)
	}
	r.inFlight.Add(1)
	r.mu.Unlock()
	defer r.inFlight.Done()
	out, err := r.scan(trace.Copy(r.base, ctx), namespace, name, read, nil)
	res := result{message: describe(out, why), annotated: nil}
	if err != nil {
		return res, fmt.Errorf("scanning ImageRepository %s/%s: %w", namespace, name, err)
	}
	return res, nil
}

// describe renders a scan outcome for a log line.
func describe(out reconcile.ScanOutcome, why string) string {
	var b strings.Builder
	b.WriteString("scanned")
	if why != "" {
		b.WriteString(" (" + why + ")")
	}
	switch {
	case out.Skipped != "":
		b.WriteString(": skipped, " + out.Skipped)
	case out.Failure != "":
		b.WriteString(": failed, " + out.Failure)
	default:
		fmt.Fprintf(&b, ": %d tags, revision %s", out.TagCount, out.Revision)
	}
	return b.String()
}

// apiServerObject is the part of an ApiServerSource event's data that tells which kind of
// object it is about.
type apiServerObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// decodeRepositoryEvent decodes the data of an ApiServerSource event in Resource mode, the mode
// knative/ configures: the whole object. It returns the ImageRepository, or why the event is
// ignored (an object of another kind), or an error wrapping events.ErrRejected.
func decodeRepositoryEvent(data []byte) (repo *v1.ImageRepository, ignored string, err error) {
	var head apiServerObject
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, "", fmt.Errorf("%w: undecodable data: %s", events.ErrRejected, events.Brief(err.Error()))
	}
	group, _, _ := strings.Cut(head.APIVersion, "/")
	if head.Kind != v1.ImageRepositoryKind || group != v1.GroupVersion.Group {
		return nil, fmt.Sprintf("%s %s is not an ImageRepository", events.Brief(head.APIVersion), events.Brief(head.Kind)), nil
	}
	repo = &v1.ImageRepository{}
	if err := json.Unmarshal(data, repo); err != nil {
		return nil, "", fmt.Errorf("%w: undecodable ImageRepository: %s", events.ErrRejected, events.Brief(err.Error()))
	}
	if err := events.CheckObject(repo.Namespace, repo.Name); err != nil {
		return nil, "", fmt.Errorf("the ImageRepository: %w", err)
	}
	return repo, "", nil
}

// apiServerDelete forgets the tags of a deleted ImageRepository: the scanner finds it gone and
// deletes its store entry. An object of the same name created since is scanned instead, which
// replaces the entry.
func (r *Receiver) apiServerDelete(ctx context.Context, e cloudevents.Event) (result, error) {
	repo, ignored, err := decodeRepositoryEvent(e.Data())
	if err != nil {
		return result{message: "rejected"}, fmt.Errorf("%s %s: %w", e.Type(), e.ID(), err)
	}
	if ignored != "" {
		return result{message: "ignored: " + ignored}, nil
	}
	return r.scanNow(ctx, repo.Namespace, repo.Name, nil, "deleted")
}

// apiServerEvent scans the ImageRepository of an ApiServerSource event when it is due.
func (r *Receiver) apiServerEvent(ctx context.Context, e cloudevents.Event) (result, error) {
	repo, ignored, err := decodeRepositoryEvent(e.Data())
	if err != nil {
		return result{message: "rejected"}, fmt.Errorf("%s %s: %w", e.Type(), e.ID(), err)
	}
	if ignored != "" {
		return result{message: "ignored: " + ignored}, nil
	}
	// A zero period: the periodic rules (retries, digest refreshes) are the cron reconciler's.
	why := reconcile.RepositoryDue(repo, reconcile.Window{Now: r.cfg.now()})
	if why == "" {
		return result{message: fmt.Sprintf("%s/%s is not due", repo.Namespace, repo.Name)}, nil
	}
	if why == reconcile.DueRequested && reconcile.RequestedByPush(repo) {
		// The receiver that set this request for a push scans it, with the pushed tags: a
		// second, hint-less scan here would list the registry again for every push.
		return result{message: fmt.Sprintf("%s/%s is not due: the push's receiver scans it", repo.Namespace, repo.Name)}, nil
	}
	// The event carries the object as it was when it changed. A scan since may have handled
	// that change already: the webhook's own scan after it set the reconcile annotation, most
	// often, whose annotation is this very event. The object as it is now decides; one read
	// instead of a second scan of the registry for every push.
	now, err := r.kube.Repositories.Get(ctx, repo.Namespace, repo.Name)
	switch {
	case apierrors.IsNotFound(err):
		return result{message: fmt.Sprintf("%s/%s is gone", repo.Namespace, repo.Name)}, nil
	case err != nil:
		return result{message: "not scanned"}, fmt.Errorf("reading ImageRepository %s/%s: %w", repo.Namespace, repo.Name, err)
	}
	if now.UID != repo.UID {
		return result{message: fmt.Sprintf("%s/%s was replaced", repo.Namespace, repo.Name)}, nil
	}
	if why = reconcile.RepositoryDue(now, reconcile.Window{Now: r.cfg.now()}); why == "" {
		return result{message: fmt.Sprintf("%s/%s is not due: handled since", repo.Namespace, repo.Name)}, nil
	}
	return r.scanNow(ctx, repo.Namespace, repo.Name, now, why)
}
