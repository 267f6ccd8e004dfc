// Package fluxevent posts Flux's events (github.com/fluxcd/pkg/apis/event/v1) to Flux's
// notification-controller, as Flux's controllers do with their --events-addr, so that Flux
// Alerts on ImageRepositories and ImagePolicies fire for reflector's scans and evaluations.
//
// A Poster never holds up its caller: events wait in a bounded queue for one sender goroutine,
// each request has a short timeout, and a receiver that is down costs a few retries for the
// first event and a single attempt for each one after it until a delivery succeeds again. What
// cannot be delivered is logged, counted and dropped; Kubernetes Events keep the record.
package fluxevent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/redact"
)

// ReportingController is the reportingController of every event: the name of the controller
// whose API reflector serves, so that what consumes Flux's events sees what it would see from
// Flux. reportingInstance, the host name, tells reflector's pods apart.
const ReportingController = "image-reflector-controller"

// Actions of the events, as Flux's image-reflector-controller reports them.
const (
	ActionScan        = "Scan"
	ActionSelectImage = "SelectImage"
)

// Defaults of a Poster without options.
const (
	// DefaultQueue is how many events may wait for delivery; more are dropped.
	DefaultQueue = 100
	// DefaultTimeout bounds one request, as Flux's recorder does.
	DefaultTimeout = 5 * time.Second
	// DefaultRetries is how many times a failed delivery is retried while the receiver is
	// answering; Flux's recorder retries more, but it holds no queue behind it.
	DefaultRetries = 2
	// DefaultDrain bounds how long Close waits for queued events.
	DefaultDrain = 5 * time.Second
)

// retryWait is the first wait before a retry; it doubles with each one.
const retryWait = 250 * time.Millisecond

// Poster posts events to a notification-controller event receiver. A nil Poster posts nothing.
type Poster struct {
	url      string
	instance string
	client   *http.Client
	log      *slog.Logger
	retries  int
	drain    time.Duration
	queue    chan eventv1.Event

	// ctx ends the delivery in flight when Close gives up waiting.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	closed bool
	// down tells that the last delivery failed: later ones get no retries until one succeeds.
	down bool
	// dropping tells that events are being dropped, so that only the first is logged.
	dropping bool
}

// Option configures a Poster.
type Option func(*Poster)

// WithQueue sets how many events may wait for delivery.
func WithQueue(n int) Option {
	return func(p *Poster) { p.queue = make(chan eventv1.Event, max(n, 1)) }
}

// WithRetries sets how many times a failed delivery is retried while the receiver is answering.
func WithRetries(n int) Option {
	return func(p *Poster) { p.retries = max(n, 0) }
}

// WithDrain sets how long Close waits for queued events.
func WithDrain(d time.Duration) Option {
	return func(p *Poster) { p.drain = d }
}

// WithLogger sets where failed deliveries are logged; the default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(p *Poster) { p.log = l }
}

// New returns a Poster that posts to addr, the event receiver's URL (Flux's --events-addr, such
// as http://notification-controller.flux-system.svc.cluster.local./), and starts its sender.
// An empty addr gives a nil Poster.
func New(addr string, opts ...Option) (*Poster, error) {
	if addr == "" {
		return nil, nil
	}
	if u, err := url.Parse(addr); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("events address %q is not an http:// or https:// URL", redact.Address(addr))
	}
	p := &Poster{
		url: addr, client: &http.Client{Timeout: DefaultTimeout},
		retries: DefaultRetries, drain: DefaultDrain, done: make(chan struct{}),
	}
	for _, o := range opts {
		o(p)
	}
	if p.queue == nil {
		p.queue = make(chan eventv1.Event, DefaultQueue)
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	// Flux reports the pod's host name; without one the event is still worth sending.
	p.instance, _ = os.Hostname()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.run()
	return p, nil
}

// Post queues the Flux event for a Kubernetes Event of eventType (Normal or Warning) about the
// object ref, with the object's annotations. It never blocks: when the queue is full the event
// is dropped.
//
// The payload is what Flux's recorder sends: severity info for Normal and error for Warning,
// the action of the object's kind, and as metadata the object's annotations under
// event.toolkit.fluxcd.io/, which notification-controller adds to its notifications.
func (p *Poster) Post(ref corev1.ObjectReference, annotations map[string]string, eventType, reason, message string) {
	if p == nil || ref.Kind == "" || ref.Name == "" || ref.Namespace == "" {
		return
	}
	e := eventv1.Event{
		InvolvedObject:      ref,
		Severity:            eventv1.EventSeverityInfo,
		Timestamp:           metav1.Now(),
		Message:             message,
		Reason:              reason,
		Action:              action(ref.Kind),
		Metadata:            Metadata(annotations),
		ReportingController: ReportingController,
		ReportingInstance:   p.instance,
	}
	if eventType == corev1.EventTypeWarning {
		e.Severity = eventv1.EventSeverityError
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.queue <- e:
		p.dropping = false
	default:
		metrics.RecordFluxEvent(metrics.FluxEventDropped)
		if !p.dropping {
			p.dropping = true
			p.log.Warn("Flux event dropped: the delivery queue is full", "address", redact.Address(p.url),
				"kind", ref.Kind, "namespace", ref.Namespace, "name", ref.Name, "reason", reason)
		}
	}
}

// Metadata returns the annotations that Flux's recorder copies into an event's metadata: those
// under the event API group's prefix, event.toolkit.fluxcd.io/. It is nil when there are none.
func Metadata(annotations map[string]string) map[string]string {
	var m map[string]string
	for k, v := range annotations {
		if strings.HasPrefix(k, eventv1.Group+"/") {
			if m == nil {
				m = map[string]string{}
			}
			m[k] = v
		}
	}
	return m
}

func action(kind string) string {
	switch kind {
	case v1.ImageRepositoryKind:
		return ActionScan
	case v1.ImagePolicyKind:
		return ActionSelectImage
	}
	return ""
}

// Close stops taking events and waits, at most the drain time, for the queued ones to be
// delivered; then it abandons the rest.
func (p *Poster) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.queue)
	}
	p.mu.Unlock()
	t := time.NewTimer(p.drain)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.cancel()
		<-p.done
	}
}

func (p *Poster) run() {
	defer close(p.done)
	defer p.cancel()
	for e := range p.queue {
		if p.ctx.Err() != nil {
			metrics.RecordFluxEvent(metrics.FluxEventDropped)
			continue
		}
		p.deliver(e)
	}
}

// deliver posts one event, with retries while the receiver is up.
func (p *Poster) deliver(e eventv1.Event) {
	body, err := json.Marshal(e)
	if err != nil {
		metrics.RecordFluxEvent(metrics.FluxEventFailed)
		p.log.Error("encoding a Flux event", "error", err)
		return
	}
	p.mu.Lock()
	attempts := 1
	if !p.down {
		attempts += p.retries
	}
	p.mu.Unlock()
	wait := retryWait
	for i := range attempts {
		if i > 0 {
			select {
			case <-time.After(wait):
			case <-p.ctx.Done():
			}
			wait *= 2
		}
		if p.ctx.Err() != nil {
			err = p.ctx.Err()
			break
		}
		var retry bool
		retry, err = p.post(body)
		if err == nil {
			p.setDown(false)
			return
		}
		if !retry {
			break
		}
	}
	metrics.RecordFluxEvent(metrics.FluxEventFailed)
	p.setDown(true)
	p.log.Warn("posting a Flux event failed", "address", redact.Address(p.url),
		"kind", e.InvolvedObject.Kind, "namespace", e.InvolvedObject.Namespace,
		"name", e.InvolvedObject.Name, "reason", e.Reason, "error", redact.Error(err))
}

// post sends one request and tells whether a failure is worth retrying: no answer, or a 5xx.
func (p *Poster) post(body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(p.ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	// What is left of a short answer is read so that the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		// notification-controller's answer to a duplicate of a recent event: delivered before.
		metrics.RecordFluxEvent(metrics.FluxEventDuplicate)
		return false, nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		metrics.RecordFluxEvent(metrics.FluxEventPosted)
		return false, nil
	case resp.StatusCode >= 500:
		return true, errors.New(resp.Status)
	}
	return false, errors.New(resp.Status)
}

func (p *Poster) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}
