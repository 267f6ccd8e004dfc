// Package metrics holds reflector's Prometheus metrics: Flux's reconcile duration histogram, so
// that dashboards and alerts made for Flux show reflector's ImageRepositories and ImagePolicies,
// and reflector's own counters, named reflector_*.
//
// Every label value is bounded: object kinds, names and namespaces (as Flux labels them), webhook
// providers from a fixed list, registry hosts, HTTP status codes and fixed result words. A tag, a
// digest or a delivery id is never a label.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry holds every metric of the process, together with the Go runtime and process
// collectors that Flux's controllers also expose.
var Registry = prometheus.NewRegistry()

var (
	reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gotk_reconcile_duration_seconds",
		Help: "The duration in seconds of a GitOps Toolkit resource reconciliation.",
		// Flux's buckets: ten between 10 ms and 30 minutes.
		Buckets: prometheus.ExponentialBucketsRange(10e-3, 1800, 10),
	}, []string{"kind", "name", "namespace"})

	webhookRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_webhook_requests_total",
		Help: "Registry webhook deliveries and registry CloudEvents, by provider and result.",
	}, []string{"provider", "result"})

	registryRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_registry_requests_total",
		Help: "HTTP requests to container registries, by host and status code (\"error\" when no answer came).",
	}, []string{"host", "code"})

	retryAfterWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_registry_retry_after_waits_total",
		Help: "Waits that a registry asked for with 429 and Retry-After, by host.",
	}, []string{"host"})

	retryAfterSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_registry_retry_after_wait_seconds_total",
		Help: "Seconds spent waiting as registries asked with Retry-After, by host.",
	}, []string{"host"})

	registryLimiters = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "reflector_registry_rate_limiters",
		Help: "Per-host request rate limiters the process keeps, one per registry host that objects name (bounded).",
	})

	storeLockWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "reflector_store_lock_wait_seconds",
		Help:    "Time a tag store call waited for the Badger directory, by mode (read or write).",
		Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"mode"})

	storeDamage = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_store_damage_total",
		Help: "Opens of the tag store that found its directory damaged, by action (rebuilt or reported).",
	}, []string{"action"})

	storeFull = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reflector_store_full_total",
		Help: "Tag store writes and writer opens refused because the volume lacked room.",
	})

	storeWritten = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_store_written_bytes_total",
		Help: "Bytes of keys and values that committed tag store writes set, by cause (listing, push, or compaction: deltas merged into a new base, and the records it replaced swept).",
	}, []string{"cause"})

	repositoryTags = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reflector_repository_tags",
		Help: "Tags stored for an ImageRepository after its last successful scan.",
	}, []string{"name", "namespace"})

	eventsSent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_events_sent_total",
		Help: "CloudEvents sent, by type and result (acknowledged or not_acknowledged).",
	}, []string{"type", "result"})

	fluxEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_flux_events_total",
		Help: "Flux events for notification-controller, by result (posted, duplicate, failed or dropped).",
	}, []string{"result"})

	cronPasses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reflector_cron_passes_total",
		Help: "Cron reconciler passes, by result (succeeded or failed).",
	}, []string{"result"})

	cronObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reflector_cron_last_pass_objects",
		Help: "What the last cron pass counted: repositories, policies, due, dispatched, failed, store_deleted.",
	}, []string{"count"})

	// No labels: a vector, so that nothing is exported until the function has read the CRD.
	policyVerifySupported = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reflector_imagepolicy_crd_verify_supported",
		Help: "1 when the served ImagePolicy CRD declares spec.verify (reflector's), 0 when it does not (Flux's: the apiserver drops every policy's signature requirement).",
	}, nil)

	cronDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "reflector_cron_pass_duration_seconds",
		Help:    "Duration of cron reconciler passes.",
		Buckets: prometheus.ExponentialBucketsRange(10e-3, 300, 12),
	})
)

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		reconcileDuration, webhookRequests, registryRequests, retryAfterWaits, retryAfterSeconds, registryLimiters,
		storeLockWait, storeDamage, storeFull, storeWritten, repositoryTags, eventsSent, fluxEvents, cronPasses, cronObjects, cronDuration,
		policyVerifySupported,
	)
}

// Handler serves the metrics in Prometheus' exposition formats.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{Registry: Registry})
}

// Kinds of the reconcile histogram, as Flux names them.
const (
	KindImageRepository = "ImageRepository"
	KindImagePolicy     = "ImagePolicy"
)

// Reconcile is one reconciliation of the object Namespace/Name of Kind, which took Took.
type Reconcile struct {
	Kind, Namespace, Name string
	// Suspended and Deleting say whether the object has spec.suspend set and whether it is
	// being deleted.
	Suspended, Deleting bool
	Took                time.Duration
}

// RecordReconcile records r. Following Flux, an object that is suspended is not recorded unless
// it is being deleted.
func RecordReconcile(r Reconcile) {
	if r.Suspended && !r.Deleting {
		return
	}
	reconcileDuration.WithLabelValues(r.Kind, r.Name, r.Namespace).Observe(r.Took.Seconds())
}

// Webhook results.
const (
	WebhookAccepted        = "accepted"
	WebhookUnauthenticated = "unauthenticated"
	WebhookIgnored         = "ignored"
	WebhookDeduplicated    = "deduplicated"
	WebhookNoMatch         = "no_match"
	WebhookRejected        = "rejected"
	WebhookRateLimited     = "rate_limited"
	// WebhookThrottled is a delivery refused before its body was read: its remote address
	// had spent its budget of deliveries that fail authentication.
	WebhookThrottled = "throttled"
	WebhookFailed    = "failed"
	// WebhookHandshake is a sender's CloudEvents webhook handshake (HTTP OPTIONS) answered.
	WebhookHandshake = "handshake"
)

// UnknownProvider is the provider label of deliveries to a provider that does not exist, so that
// a scan of made-up paths adds one series, not one per path.
const UnknownProvider = "unknown"

// RecordWebhook counts one delivery. provider must come from a fixed list; the caller maps
// anything else to UnknownProvider.
func RecordWebhook(provider, result string) {
	webhookRequests.WithLabelValues(provider, result).Inc()
}

// MaxHosts bounds the registry hosts that label series: objects name hosts, and any tenant may
// name any. Requests to hosts beyond the first MaxHosts of the process count under OtherHost.
const MaxHosts = 256

// OtherHost is the host label of the registries beyond MaxHosts.
const OtherHost = "other"

var hosts = struct {
	sync.Mutex
	seen map[string]bool
}{seen: map[string]bool{}}

// hostLabel returns the label of a registry host: the host, or OtherHost once MaxHosts others
// have labels.
func hostLabel(host string) string {
	hosts.Lock()
	defer hosts.Unlock()
	if hosts.seen[host] {
		return host
	}
	if len(hosts.seen) >= MaxHosts {
		return OtherHost
	}
	hosts.seen[host] = true
	return host
}

// RecordRegistryRequest counts one request to a registry: its HTTP status code, or 0 when no
// answer came. host is the registry host of the object the request was made for, whichever host
// the request itself went to.
func RecordRegistryRequest(host string, code int) {
	c := "error"
	if code >= 100 && code < 600 {
		c = strconv.Itoa(code)
	} else if code > 0 {
		c = "invalid"
	}
	registryRequests.WithLabelValues(hostLabel(host), c).Inc()
}

// RecordRetryAfter counts a wait that a registry asked for.
func RecordRetryAfter(host string, wait time.Duration) {
	host = hostLabel(host)
	retryAfterWaits.WithLabelValues(host).Inc()
	retryAfterSeconds.WithLabelValues(host).Add(wait.Seconds())
}

// SetRegistryLimiters records how many per-host rate limiters the process keeps.
func SetRegistryLimiters(n int) { registryLimiters.Set(float64(n)) }

// RecordStoreWait records how long a store call waited for the database.
func RecordStoreWait(write bool, waited time.Duration) {
	mode := "read"
	if write {
		mode = "write"
	}
	storeLockWait.WithLabelValues(mode).Observe(waited.Seconds())
}

// Causes of tag store writes.
const (
	StoreWriteListing    = "listing"
	StoreWritePush       = "push"
	StoreWriteCompaction = "compaction"
)

// RecordStoreWritten counts n bytes that a committed tag store write set, for cause.
func RecordStoreWritten(n int, cause string) {
	storeWritten.WithLabelValues(cause).Add(float64(n))
}

// SetRepositoryTags records the number of tags stored for an ImageRepository.
func SetRepositoryTags(namespace, name string, n int) {
	repositoryTags.WithLabelValues(name, namespace).Set(float64(n))
}

// ForgetRepository drops the series of an ImageRepository that no longer exists.
func ForgetRepository(namespace, name string) {
	repositoryTags.DeleteLabelValues(name, namespace)
}

// RecordEventSent counts one CloudEvent sent and whether the sink acknowledged it.
func RecordEventSent(ceType string, acknowledged bool) {
	result := "acknowledged"
	if !acknowledged {
		result = "not_acknowledged"
	}
	eventsSent.WithLabelValues(ceType, result).Inc()
}

// Results of a Flux event posted to notification-controller.
const (
	// FluxEventPosted: the receiver accepted it.
	FluxEventPosted = "posted"
	// FluxEventDuplicate: the receiver answered 429, its answer to a recent duplicate.
	FluxEventDuplicate = "duplicate"
	// FluxEventFailed: no attempt was accepted.
	FluxEventFailed = "failed"
	// FluxEventDropped: the delivery queue was full, or the process stopped before it was sent.
	FluxEventDropped = "dropped"
)

// RecordFluxEvent counts one Flux event by its result.
func RecordFluxEvent(result string) {
	fluxEvents.WithLabelValues(result).Inc()
}

// RecordCronPass records a pass by its counts (repositories, policies, due, dispatched, ...);
// a failed pass (err set) counts only as failed.
func RecordCronPass(counts map[string]int, took time.Duration, err error) {
	if err != nil {
		cronPasses.WithLabelValues("failed").Inc()
		return
	}
	cronPasses.WithLabelValues("succeeded").Inc()
	for name, v := range counts {
		cronObjects.WithLabelValues(name).Set(float64(v))
	}
	cronDuration.Observe(took.Seconds())
}

// What the tag store did about a damaged directory.
const (
	// StoreDamageRebuilt: a writer set the directory aside and started an empty store.
	StoreDamageRebuilt = "rebuilt"
	// StoreDamageReported: the damage was reported and left to a writer (a reader found it, or
	// setting it aside failed).
	StoreDamageReported = "reported"
)

// RecordStoreDamage counts a damaged tag store directory found by an open, by what was done.
func RecordStoreDamage(action string) {
	storeDamage.WithLabelValues(action).Inc()
}

// RecordStoreFull counts a tag store write, or writer's open, refused for lack of room.
func RecordStoreFull() {
	storeFull.Inc()
}

// SetPolicyVerifySupported records whether the served ImagePolicy CRD declares spec.verify.
func SetPolicyVerifySupported(supported bool) {
	v := 0.0
	if supported {
		v = 1
	}
	policyVerifySupported.WithLabelValues().Set(v)
}
