// Package receiver is where pushes enter reflector: an HTTP webhook receiver for registry
// notifications and a CloudEvents handler for the broker path (scan requests from the cron
// reconciler, Knative ApiServerSource events, registry CloudEvents). Both find the
// ImageRepositories an event is about, record the request durably with the reconcile-request
// annotation, and scan them.
//
// Writing the annotation is the commit point: a webhook is answered once every matched object
// carries it. A push's scan runs in the background beside the annotation patch: it confirms,
// stores and announces the pushed tags while the patch is on its way, and writes the status
// once the patch has returned. When that scan is lost (the process stops, the registry fails),
// the cron reconciler sees an annotation that differs from status.lastHandledReconcileAt and
// scans again.
package receiver

import (
	"context"
	"crypto/rand"
	"log/slog"
	"sync"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
)

// Scanner scans one ImageRepository; *reconcile.Scanner is the one the scan function uses.
type Scanner interface {
	// Scan scans the repository the request names; with req.Beside, while the caller's
	// reconcile-request patch is on its way, whose result the caller reports to req.Beside.
	Scan(ctx context.Context, req reconcile.ScanRequest) (reconcile.ScanOutcome, error)
	// Join adds a request to a follow-up scan already collected for the repository when one of
	// its requests was recorded after the running scan read the object, and reports whether it
	// did; the caller then records nothing and scans nothing.
	Join(ctx context.Context, namespace, name string, hint *reconcile.Hint) bool
}

// Receiver serves registry webhooks under /hook/ (see ServeHTTP) and CloudEvents (see
// CloudEvents). One Receiver serves a whole process; it is safe for concurrent use.
type Receiver struct {
	kube    *kube.Client
	scanner Scanner
	cfg     config

	repos   *catalog
	secrets *receivers
	decoy   []byte
	limits  *limiters
	// unauthenticated is taken per remote address before a webhook's body is read.
	unauthenticated *addressLimits
	// senders limits the registry pushes of each CloudEvents sender.
	senders *addressLimits
	seen    *dedup
	// seenEvents remembers the CloudEvents handled, apart from the webhooks' deliveries so
	// that neither path can push the other's out.
	seenEvents *dedup
	base       context.Context
	cancel     context.CancelFunc
	mu         sync.Mutex
	closing    bool
	inFlight   sync.WaitGroup
}

// New returns a Receiver that matches events against the ImageRepositories of c and scans them
// with s.
func New(c *kube.Client, s Scanner, opts ...Option) *Receiver {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Receiver{
		kube:    c,
		scanner: s,
		cfg:     cfg,
		repos:   newCatalog(c, cfg.repositories, cfg.pageSize),
		secrets: newReceivers(c, cfg.secretTTL, cfg.pageSize, cfg.now),
		decoy:   decoySecret(),
		limits:  newLimiters(cfg.rate, cfg.burst),
		seen:    newDedup(cfg.dedupWindow, cfg.dedupSize),

		unauthenticated: newAddressLimits(cfg.unauthRate, cfg.unauthBurst, DefaultSenderLimits, cfg.now),
		senders:         newAddressLimits(cfg.rate, cfg.burst, DefaultSenderLimits, cfg.now),
		seenEvents:      newDedup(cfg.dedupWindow, cfg.dedupSize),
		base:            base,
		cancel:          cancel,
	}
}

// decoySecret returns a random secret that no sender knows: a delivery to a receiver that does
// not exist is verified against it, so that it fails exactly as a wrong token does.
func decoySecret() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// Object names one ImageRepository that an answer reports.
type Object struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Answer is the JSON body of every webhook answer.
type Answer struct {
	// Message says what happened in one line: accepted, the reason nothing was done, or the
	// error.
	Message string `json:"message"`
	// DeliveryID is the id the delivery was recognised by, when it got that far.
	DeliveryID string `json:"deliveryId,omitempty"`
	// Objects lists the ImageRepositories whose scan request is recorded: by the
	// reconcile-request annotation this delivery set, or by the one of a scan it joined.
	Objects []Object `json:"objects,omitempty"`
	// TraceID is the trace the delivery belongs to; the log lines of its scans and evaluations
	// carry it as trace_id.
	TraceID string `json:"traceId,omitempty"`
}

// Shutdown stops starting background scans and waits for those under way. When ctx ends
// first, their contexts are cancelled and Shutdown returns ctx's error once they have
// returned; their annotations remain for the cron reconciler.
func (r *Receiver) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.inFlight.Wait()
		close(done)
	}()
	select {
	case <-done:
		r.cancel()
		return nil
	case <-ctx.Done():
		r.cancel()
		<-done
		return ctx.Err()
	}
}

// scanBeside scans the target t in the background while its annotation patch, whose result
// rec receives, is on its way, in the trace of req, within its timeout and the reserve that
// records the outcome (reconcile.RecordReserve). It reports false when the Receiver is shutting
// down and the scan is left to the cron reconciler.
func (r *Receiver) scanBeside(req context.Context, t target, rec *reconcile.Recording) bool {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return false
	}
	r.inFlight.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.inFlight.Done()
		ctx, cancel := context.WithTimeout(trace.Copy(r.base, req), t.timeout+reconcile.RecordReserve)
		defer cancel()
		if _, err := r.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: t.namespace, Name: t.name, Hint: t.hint(), Beside: rec}); err != nil {
			r.cfg.log.WarnContext(ctx, "background scan failed; the cron reconciler retries it",
				"namespace", t.namespace, "name", t.name, "error", redact.String(err.Error()))
		}
	}()
	return true
}

// scan scans namespace/name, from read when it is the object as just read.
func (r *Receiver) scan(ctx context.Context, namespace, name string, read *v1.ImageRepository, hint *reconcile.Hint) (reconcile.ScanOutcome, error) {
	return r.scanner.Scan(ctx, reconcile.ScanRequest{Namespace: namespace, Name: name, Object: read, Hint: hint})
}

// logger returns the configured logger.
func (r *Receiver) logger() *slog.Logger { return r.cfg.log }
