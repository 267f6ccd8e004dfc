package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
	"github.com/imagereflector/reflector/internal/webhook"
)

// ServeHTTP receives registry webhooks:
//
//	POST /hook/<provider>/<namespace>   the namespace's receiver; its token is the key "token"
//	                                    of the Secret "reflector-webhook" in that namespace, and
//	                                    it touches ImageRepositories of that namespace only
//	POST /hook/<provider>               the cluster receiver (WithClusterSecret); it touches
//	                                    ImageRepositories of every namespace
//	OPTIONS /hook/<provider>[/<ns>]     the CloudEvents webhook handshake, for the providers
//	                                    whose sender makes it (webhook.Handshake; see handshake)
//
// A receiver without its token does not exist, and a delivery to it is answered exactly as one
// with a wrong token (401, the same message), so a sender cannot tell which namespaces are set
// up. The answers: 202 with the objects whose scan is requested; 200 with a reason when the
// delivery is authentic but nothing matches, it is ignored (a pull, a delete) or it repeats an
// earlier delivery (the same body, which is what a signature covers, or for the providers whose
// events carry the sender's ids, webhook.DedupByID, the same ids, within the dedup window); 400
// malformed; 401 missing or wrong signature or token, with nothing changed; 404 an unknown
// provider or path; 405 neither POST nor a handshake; 413 over MaxBodyBytes; 429 over the receiver's rate, or, before
// the body is read, over the remote address's budget of deliveries that fail authentication
// (WithUnauthenticatedLimit); 500 when the API server fails. Every answer is one
// JSON log line, which never contains the query string (tokens travel there).
//
// The delivery continues the trace of its traceparent header, or starts one; the answer, its
// log line, the scans and the events they emit carry its trace id.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	ctx := trace.Continue(req.Context(), req.Header.Get(trace.Header))
	req = req.WithContext(ctx)
	res := r.receive(w, req)
	writeAnswer(ctx, w, res)
	metrics.RecordWebhook(providerLabel(res.provider), res.outcome())
	r.logAnswer(ctx, "webhook", res, time.Since(start))
}

// providerLabel bounds the provider label to the known providers.
func providerLabel(p string) string {
	if webhook.Known(p) {
		return p
	}
	return metrics.UnknownProvider
}

// result is what handling a delivery came to.
type result struct {
	status     int
	message    string
	provider   string
	receiver   string
	deliveryID string
	annotated  []target
	// joined are matched targets whose request joined a scan already collected (Scanner.Join):
	// they are reported, not annotated, and not scanned again.
	joined []target
	err    error
	// skipped is the metric result of an authentic delivery that changed nothing
	// (metrics.WebhookDeduplicated, metrics.WebhookNoMatch), or of a 429 before authentication
	// (metrics.WebhookThrottled); other results follow from status.
	skipped string
}

// recorded returns the targets whose scan request is recorded: annotated, or joined.
func (res result) recorded() []target {
	return append(slices.Clip(res.annotated), res.joined...)
}

// outcome is the result label of the delivery's metric.
func (res result) outcome() string {
	switch {
	case res.status == http.StatusTooManyRequests && res.skipped != "":
		return res.skipped
	case res.status == http.StatusAccepted:
		return metrics.WebhookAccepted
	case res.status == http.StatusUnauthorized:
		return metrics.WebhookUnauthenticated
	case res.status == http.StatusTooManyRequests:
		return metrics.WebhookRateLimited
	case res.status >= 500:
		return metrics.WebhookFailed
	case res.status >= 400:
		return metrics.WebhookRejected
	case res.skipped != "":
		return res.skipped
	}
	return metrics.WebhookIgnored
}

func (r *Receiver) receive(w http.ResponseWriter, req *http.Request) result {
	rt, ok := parseRoute(req.URL.Path)
	if !ok {
		return result{status: http.StatusNotFound, message: "no such receiver"}
	}
	res := result{provider: rt.provider, receiver: rt.receiverName()}
	handshake := webhook.Handshake(rt.provider)
	if handshake && req.Method == http.MethodOptions {
		return r.handshake(w, req, res)
	}
	if req.Method != http.MethodPost {
		allow := http.MethodPost
		if handshake {
			allow = http.MethodOptions + ", " + http.MethodPost
		}
		w.Header().Set("Allow", allow)
		return res.with(http.StatusMethodNotAllowed, "webhooks are POSTed")
	}
	if !webhook.Known(rt.provider) {
		return res.with(http.StatusNotFound, fmt.Sprintf("unknown provider; known: %s", strings.Join(webhook.Providers(), ", ")))
	}
	// Reading the body and checking its signature are what a sender without the token can make
	// the receiver do; each remote address has a budget of deliveries that fail
	// authentication, checked before the read and charged once a delivery has failed, so that
	// deliveries with the right token, however many at once, never spend it.
	addr := remoteHost(req.RemoteAddr)
	if !r.unauthenticated.allow(addr) {
		w.Header().Set("Retry-After", "1")
		res.skipped = metrics.WebhookThrottled
		return res.with(http.StatusTooManyRequests, "too many deliveries that fail authentication from this address; retry later")
	}
	authenticated := false
	defer func() {
		if !authenticated {
			r.unauthenticated.charge(addr)
		}
	}()
	if req.ContentLength > MaxBodyBytes {
		return res.with(http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", MaxBodyBytes))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return res.with(http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", MaxBodyBytes))
		}
		return res.with(http.StatusBadRequest, "reading the body failed")
	}
	secret, err := r.secret(req.Context(), rt)
	if err != nil {
		// The receiver's own failure, not the sender's.
		authenticated = true
		res.err = err
		return res.with(http.StatusInternalServerError, "cannot read the receiver's token")
	}
	// A receiver that does not exist verifies against a secret nobody knows, so that its answer
	// is the one a wrong token gets: a sender cannot tell which namespaces have a receiver.
	exists := len(secret) > 0
	if !exists {
		secret = r.decoy
	}
	evs, err := webhook.Parse(rt.provider, webhook.Request{Header: req.Header, Query: req.URL.Query(), Body: body}, secret)
	if !exists && !errors.Is(err, webhook.ErrUnauthenticated) {
		err = fmt.Errorf("%s: %w", rt.provider, webhook.ErrUnauthenticated)
	}
	if errors.Is(err, webhook.ErrUnauthenticated) {
		return res.with(http.StatusUnauthorized, err.Error())
	}
	authenticated = true
	switch {
	case errors.Is(err, webhook.ErrIgnored):
		return res.with(http.StatusOK, err.Error())
	case errors.Is(err, webhook.ErrUnknownProvider):
		return res.with(http.StatusNotFound, err.Error())
	case err != nil:
		return res.with(http.StatusBadRequest, err.Error())
	}
	if !r.limits.allow(rt.provider + "/" + res.receiver) {
		w.Header().Set("Retry-After", "1")
		return res.with(http.StatusTooManyRequests, "the receiver's rate limit is exceeded; retry later")
	}
	scope := rt.provider + "/" + res.receiver
	key := bodyKey(scope, body)
	if webhook.DedupByID(rt.provider) {
		key = idKey(scope, evs)
	}
	d := r.deliver(req.Context(), r.seen, key, rt.namespace, evs)
	d.provider, d.receiver = res.provider, res.receiver
	return d
}

// remoteHost returns the host of a request's remote address, the key of its unauthenticated
// budget.
func remoteHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// secret returns the token of the receiver rt names, nil when it does not exist.
func (r *Receiver) secret(ctx context.Context, rt route) ([]byte, error) {
	if rt.namespace == "" {
		return r.cfg.clusterSecret, nil
	}
	return r.secrets.token(ctx, rt.namespace)
}

// with sets the answer. Parse errors may quote the payload, which is the sender's and may hold
// URLs with userinfo; the answer and its log line carry none.
func (res result) with(status int, message string) result {
	res.status, res.message = status, redact.String(message)
	return res
}

// deliver handles authenticated events: drops a delivery whose key seen holds within the dedup
// window, matches the events against the ImageRepositories of namespace ("" for all) and
// annotates the matches. The caller answers and then starts the scans of res.annotated.
func (r *Receiver) deliver(ctx context.Context, seen *dedup, key, namespace string, evs []webhook.Event) result {
	res := result{deliveryID: deliveryID(evs)}
	if !seen.claim(key, r.cfg.now()) {
		res.skipped = metrics.WebhookDeduplicated
		return res.with(http.StatusOK, "duplicate delivery")
	}
	targets, err := r.match(ctx, namespace, evs)
	if err != nil {
		seen.release(key)
		res.err = err
		return res.with(http.StatusInternalServerError, "cannot list ImageRepositories")
	}
	if len(targets) == 0 {
		res.skipped = metrics.WebhookNoMatch
		return res.with(http.StatusOK, "no ImageRepository matches "+eventKeys(evs))
	}
	// A target whose follow-up scan is already collected, behind a request recorded after the
	// running scan read the object (Scanner.Join), takes this request without a patch: a stream
	// of pushes into one repository costs one patch per scan instead of one per delivery.
	targets = slices.DeleteFunc(targets, func(t target) bool {
		if r.scanner.Join(ctx, t.namespace, t.name, t.hint()) {
			res.joined = append(res.joined, t)
			return true
		}
		return false
	})
	if len(targets) == 0 {
		return res.with(http.StatusAccepted, "accepted")
	}
	// The scans confirm and store the pushed tags while the annotations, the commit point, are
	// written; each writes its status once its annotation is in (reconcile.Recording).
	recs := make([]*reconcile.Recording, len(targets))
	sent := time.Now()
	for i, t := range targets {
		recs[i] = reconcile.NewRecording(sent)
		r.scanBeside(ctx, t, recs[i])
	}
	res.annotated, err = r.annotate(ctx, targets, recs)
	if err != nil {
		// A retry annotates again, which is harmless; the objects already annotated are
		// scanned now.
		seen.release(key)
		res.err = err
		return res.with(http.StatusInternalServerError, "cannot record the scan request")
	}
	if len(res.annotated) == 0 && len(res.joined) == 0 {
		// Every match was deleted since the listing.
		res.skipped = metrics.WebhookNoMatch
		return res.with(http.StatusOK, "no ImageRepository matches "+eventKeys(evs))
	}
	return res.with(http.StatusAccepted, "accepted")
}

// eventKeys names the repositories of evs for an answer: the first few, and how many more.
func eventKeys(evs []webhook.Event) string {
	const shown = 5
	seen := map[string]bool{}
	var keys []string
	for _, e := range evs {
		k := e.Key()
		if !seen[k] {
			seen[k] = true
			if len(keys) < shown {
				keys = append(keys, k)
			}
		}
	}
	out := strings.Join(keys, ", ")
	if len(seen) > shown {
		out += fmt.Sprintf(" and %d more", len(seen)-shown)
	}
	return out
}

func writeAnswer(ctx context.Context, w http.ResponseWriter, res result) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(res.status)
	a := Answer{Message: res.message, DeliveryID: res.deliveryID, Objects: objects(res.recorded())}
	if tc, ok := trace.From(ctx); ok {
		a.TraceID = tc.TraceIDString()
	}
	_ = json.NewEncoder(w).Encode(a)
}

// logAnswer writes the one line of an answer.
func (r *Receiver) logAnswer(ctx context.Context, kind string, res result, took time.Duration) {
	level := slog.LevelInfo
	switch {
	case res.status >= 500:
		level = slog.LevelError
	case res.status >= 400:
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("provider", res.provider),
		slog.String("receiver", res.receiver),
		slog.String("deliveryId", res.deliveryID),
		slog.Int("status", res.status),
		slog.String("reason", res.message),
		slog.String("objects", objectNames(res.recorded())),
		slog.Duration("duration", took),
	}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", redact.String(res.err.Error())))
	}
	r.logger().LogAttrs(ctx, level, kind, attrs...)
}
