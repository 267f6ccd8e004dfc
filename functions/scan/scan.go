// Package scan is the scan function: registry webhooks (POST /hook/...) and CloudEvents (POST /)
// arrive here, are matched to ImageRepositories, annotated and scanned. It holds only the
// wiring; the work is internal/receiver's and internal/reconcile's.
//
// It has two surfaces: Webhooks, the public one that registries reach (/hook/... and /healthz,
// and /broker, where the Broker delivers the ApiServerSource's ImageRepository events, only
// when REFLECTOR_OIDC_AUDIENCE is set), and CloudEvents, the cluster-local one that the broker
// delivers to (scan requests, ApiServerSource events, registry CloudEvents). Both check the
// sender's token when REFLECTOR_OIDC_AUDIENCE is set, as knative/ and make run set it: a
// CloudEvent without a ServiceAccount token for that audience is answered 401 and changes
// nothing. cmd/scan serves each on a listener of its own. The package
// registers them with functions-framework-go as the functions "webhook" and "scan", which Open
// builds from the environment on first use, as cmd/scan does when it starts. A host with
// FUNCTION_TARGET set serves that one surface at "/", the way to deploy it. A host without
// FUNCTION_TARGET serves both on one listener, each at its name's path only: POST /scan reaches
// the CloudEvents surface, /webhook reaches the webhook surface at a path it answers 404, and
// /hook/... and /healthz are 404; such a host takes no registry webhooks and serves the
// cluster-local surface, so it must not be reachable from outside the cluster.
//
// The environment:
//
//	KUBECONFIG                      kubeconfig file; in-cluster configuration without it
//	REFLECTOR_STORE_DIR             the Badger tag store directory (required)
//	REFLECTOR_CLUSTER_SECRET_FILE   file holding the cluster receiver's token; without it
//	                                /hook/<provider> does not exist
//	REFLECTOR_WEBHOOK_RATE          deliveries per second each receiver accepts (default 10), and
//	                                registry-push CloudEvents each sender may send
//	REFLECTOR_WEBHOOK_BURST         and in a burst (default 50)
//	REFLECTOR_WEBHOOK_UNAUTHENTICATED_RATE  webhook deliveries per second that fail authentication
//	                                from one remote address (default 5), counted before the body
//	                                is read: beyond it and its burst a delivery from that address
//	                                is answered 429 unread, unverified; only failed deliveries are
//	                                charged. Behind Knative's ingress every delivery comes from the
//	                                proxy, so this bounds them all together
//	REFLECTOR_WEBHOOK_UNAUTHENTICATED_BURST  and in a burst (default 20)
//	REFLECTOR_REGISTRY_RATE         requests per second the scans send to one registry host (default
//	                                10; 0: no limit): a push costs one, so a release wave of N pushes
//	                                into one registry is confirmed in about N divided by this
//	REFLECTOR_REGISTRY_BURST        and at once after a quiet period (default 10)
//	K_SINK                          where TagsChanged events go (Knative SinkBinding)
//	K_SINK_TOKEN_FILE               the token each TagsChanged event carries, for K_SINK's audience
//	                                (default /oidc/token, where the SinkBinding mounts it)
//	REFLECTOR_EVENTS_ADDR           notification-controller's event receiver (Flux's --events-addr,
//	                                e.g. http://notification-controller.flux-system.svc.cluster.local./):
//	                                each scan's Event is also posted there as a Flux event, so Flux
//	                                Alerts on ImageRepositories fire; none without it
//	REFLECTOR_METRICS_ADDR          where cmd/scan serves /metrics (default :9095; "off": none)
//	REFLECTOR_LISTEN_HOST           the address cmd/scan serves $PORT on (default: every interface)
//	REFLECTOR_SURFACE               what cmd/scan serves on $PORT: webhooks (default) or cloudevents
//	REFLECTOR_CLOUDEVENTS_PORT      a second port on which cmd/scan serves the CloudEvents surface,
//	                                for a single process serving both (make run); never expose it
//	REFLECTOR_OIDC_AUDIENCE         require CloudEvents senders to present a ServiceAccount token
//	                                for this audience (Knative Eventing's authentication-oidc;
//	                                knative/ sets reflector-scan, and reflector-webhook for the
//	                                public surface's /broker); unset, the public surface serves
//	                                no /broker and the cluster-local one any caller: only for
//	                                tests of the function alone
//	REFLECTOR_OIDC_NAMESPACES       and a ServiceAccount of one of these namespaces (comma-separated)
//	REFLECTOR_FEATURE_GATES         feature gates as Flux's --feature-gates, e.g.
//	                                ObjectLevelWorkloadIdentity=true: ImageRepositories with provider
//	                                aws, azure or gcp may log in as their spec.serviceAccountName
//	REFLECTOR_DEFAULT_SERVICE_ACCOUNT  Flux's --default-service-account: ImageRepositories with a cloud
//	                                provider and no spec.serviceAccountName log in as this
//	                                ServiceAccount of their namespace, never as the scan function
//
// The clouds' own variables (AWS_*, AZURE_*, IDENTITY_ENDPOINT, GOOGLE_APPLICATION_CREDENTIALS,
// GCE_METADATA_HOST) give the scan function its own identity; they are read at the first scan
// that needs them, not at start-up.
package scan

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"golang.org/x/time/rate"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/cloudauth"
	// ECR logins (spec.provider aws); the cron reconciler links cloudauth without them.
	_ "github.com/imagereflector/reflector/internal/cloudauth/awslogin"
	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/receiver"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/tokenreview"
)

// The names under which the scan function registers its surfaces with functions-framework-go,
// and under which Open's Function holds them.
const (
	// WebhookTarget is the public surface, Handler.Webhooks.
	WebhookTarget = "webhook"
	// ScanTarget is the cluster-local surface, Handler.CloudEvents.
	ScanTarget = "scan"
)

func init() {
	// One Host for both: a host that serves both functions on one listener (no
	// FUNCTION_TARGET, see the package comment) keeps one receiver and one store.
	host := function.NewHost("scan", function.DefaultTimeouts, nil, Open)
	functions.HTTP(WebhookTarget, host.Handler(WebhookTarget))
	functions.HTTP(ScanTarget, host.Handler(ScanTarget))
}

// Open builds the scan function from the environment, as cmd/scan and a functions-framework-go
// host serve it, both passing function.Logger's logger; its Close is Handler.Shutdown. log nil
// means slog.Default().
func Open(log *slog.Logger) (*function.Function, error) {
	d, err := FromEnv()
	if err != nil {
		return nil, err
	}
	d.Log = log
	h := NewHandler(d)
	return &function.Function{
		Handlers: map[string]http.Handler{WebhookTarget: h.Webhooks(), ScanTarget: h.CloudEvents()},
		Close:    h.Shutdown,
	}, nil
}

// Deps are what the scan function works with.
type Deps struct {
	Kube     *kube.Client
	Registry *registry.Client
	Store    *store.Store
	// Sink receives TagsChanged events; nil sends none.
	Sink *events.Sender
	// Recorder writes Kubernetes Events; nil writes none.
	Recorder *kube.Recorder
	// Log receives one line per answer and per scan; nil means slog.Default().
	Log *slog.Logger
	// Receiver holds further options of the receiver, such as its cluster secret and rate.
	Receiver []receiver.Option
	// Senders verifies the token of each CloudEvents request; nil accepts every request on the
	// cluster-local surface and leaves the public surface without BrokerPath.
	Senders *tokenreview.Verifier
	// Repositories holds the ImageRepositories as a watch delivers them, so that a delivery
	// is matched and its scan starts without a request to the apiserver; what it does not hold
	// yet is read from the apiserver, and so is everything when it is nil.
	Repositories *kube.Cache[*v1.ImageRepository]
}

// FromEnv builds Deps from the environment described in the package comment.
func FromEnv() (*Deps, error) {
	env, err := function.FromEnv(events.SourceScan)
	if err != nil {
		return nil, err
	}
	var opts []receiver.Option
	if path := os.Getenv("REFLECTOR_CLUSTER_SECRET_FILE"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("REFLECTOR_CLUSTER_SECRET_FILE: %w", err)
		}
		// A mounted Secret often ends in a newline that the sender does not send.
		opts = append(opts, receiver.WithClusterSecret([]byte(strings.TrimSpace(string(b)))))
	}
	if r, b, set, err := bucketFromEnv("REFLECTOR_WEBHOOK_RATE", "REFLECTOR_WEBHOOK_BURST", receiver.DefaultRate, receiver.DefaultBurst); err != nil {
		return nil, err
	} else if set {
		opts = append(opts, receiver.WithRateLimit(r, b))
	}
	if r, b, set, err := bucketFromEnv("REFLECTOR_WEBHOOK_UNAUTHENTICATED_RATE", "REFLECTOR_WEBHOOK_UNAUTHENTICATED_BURST", receiver.DefaultUnauthenticatedRate, receiver.DefaultUnauthenticatedBurst); err != nil {
		return nil, err
	} else if set {
		opts = append(opts, receiver.WithUnauthenticatedLimit(r, b))
	}
	cloud, err := cloudauth.FromEnv()
	if err != nil {
		return nil, err
	}
	limit, err := registry.RateLimitFromEnv()
	if err != nil {
		return nil, err
	}
	guard, err := egress.FromEnv()
	if err != nil {
		return nil, err
	}
	storeOpts := []store.Option{store.HandOverListings()}
	if function.ReleaseAfterStore(os.Getenv) {
		r := &function.Releaser{Every: 500 * time.Millisecond, Release: function.ReleaseNow}
		storeOpts = append(storeOpts, store.AfterClose(r.Request))
	}
	regOpts := append([]registry.Option{registry.WithCloudAuth(cloud), registry.WithEgress(guard)}, limit...)
	d := &Deps{
		Kube:     env.Kube,
		Registry: registry.New(regOpts...),
		Store:    store.New(env.StoreDir, storeOpts...),
		Sink:     env.Sink,
		Recorder: kube.NewRecorder(env.Kube, "reflector-scan", kube.PostingTo(env.FluxEvents)),
		Receiver: opts,
		Senders:  env.Senders,
	}
	d.Repositories = kube.NewCache[*v1.ImageRepository](env.Kube.Repositories, nil)
	// Until its first listing has arrived, deliveries read the repositories from the apiserver.
	d.Repositories.Start(context.Background())
	return d, nil
}

// bucketFromEnv reads a token bucket from the variables rateVar (per second) and burstVar: either
// alone keeps the other's default, perSecond or burst. set is false when neither is set.
func bucketFromEnv(rateVar, burstVar string, perSecond rate.Limit, burst int) (rate.Limit, int, bool, error) {
	r, b := os.Getenv(rateVar), os.Getenv(burstVar)
	if r == "" && b == "" {
		return perSecond, burst, false, nil
	}
	if r != "" {
		f, err := strconv.ParseFloat(r, 64)
		if err != nil {
			return 0, 0, false, fmt.Errorf("%s: %w", rateVar, err)
		}
		perSecond = rate.Limit(f)
	}
	if b != "" {
		n, err := strconv.Atoi(b)
		if err != nil {
			return 0, 0, false, fmt.Errorf("%s: %w", burstVar, err)
		}
		burst = n
	}
	return perSecond, burst, true, nil
}

// Handler holds the scan function's two surfaces over one receiver.
type Handler struct {
	deps     *Deps
	log      *slog.Logger
	receiver *receiver.Receiver
}

// NewHandler returns the function's handler over d.
func NewHandler(d *Deps) *Handler {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	scanner := &reconcile.Scanner{
		Kube: d.Kube, Registry: d.Registry, Store: d.Store, Recorder: d.Recorder, Log: log,
	}
	opts := append([]receiver.Option{receiver.WithLogger(log)}, d.Receiver...)
	// A nil pointer in an interface would be non-nil; leave such fields unset instead.
	if d.Sink != nil {
		scanner.Sink = d.Sink
	}
	if d.Repositories != nil {
		scanner.Repositories = d.Repositories
		opts = append(opts, receiver.WithRepositories(d.Repositories))
	}
	return &Handler{deps: d, log: log, receiver: receiver.New(d.Kube, scanner, opts...)}
}

// BrokerPath is where the public surface takes the Broker's deliveries of the ApiServerSource's
// ImageRepository events (the Triggers of knative/eventing.yaml name it as their subscriber's
// uri), and only with Deps.Senders set.
const BrokerPath = "/broker"

// Webhooks returns the public surface, the one registries reach:
//
//	GET  /healthz   200
//	POST /hook/...  registry webhooks (receiver.Receiver.ServeHTTP)
//	POST /broker    with Deps.Senders set: the ApiServerSource's ImageRepository events from the
//	                Broker (receiver.Receiver.RepositoryEvents); a request without a valid token
//	                for the Verifier's audience gets 401 and its body is not read
//
// Every other path is 404, and /broker too without Deps.Senders: the public surface takes no
// CloudEvent from a sender it cannot prove.
func (h *Handler) Webhooks() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", function.Healthz)
	mux.Handle("/hook/", h.receiver)
	if h.deps.Senders != nil {
		mux.Handle(BrokerPath, h.deps.Senders.Require(h.receiver.RepositoryEvents()))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not found", http.StatusNotFound)
	})
	return mux
}

// CloudEvents returns the cluster-local surface, the one the broker delivers to:
//
//	GET  /healthz   200
//	POST /          CloudEvents in binary or structured mode (receiver.Receiver.HandleCloudEvent)
//
// With Deps.Senders set, a request without a valid token for its audience gets 401.
func (h *Handler) CloudEvents() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", function.Healthz)
	mux.Handle("/", h.deps.Senders.Require(h.receiver.CloudEvents()))
	return mux
}

// Shutdown waits for the background scans until ctx ends, then cancels them with a warning
// (their annotations remain, and the cron reconciler completes them), and closes the recorder
// and the tag store. Call it after the server has stopped taking requests.
func (h *Handler) Shutdown(ctx context.Context) error {
	if err := h.receiver.Shutdown(ctx); err != nil {
		h.log.Warn("background scans cut short; the cron reconciler completes them", "error", err.Error())
	}
	h.deps.Repositories.Stop()
	h.deps.Recorder.Shutdown()
	return h.deps.Store.Close()
}
