// Package policy is the policy function: it selects the latest image of ImagePolicies from the
// tag store and writes their status. It holds only the wiring; the work is
// internal/reconcile's Evaluator.
//
// It is cluster-local: the broker delivers to it and nothing outside the cluster reaches it. With
// REFLECTOR_OIDC_AUDIENCE set, as knative/ and make run set it, every request but /healthz must
// carry a ServiceAccount token for that audience (401 otherwise, nothing evaluated). It
// registers one HTTP function, "policy", with functions-framework-go, which answers:
//
//	GET  /healthz                                   200
//	POST /evaluate?namespace=N&name=P               evaluate ImagePolicy N/P; JSON outcome (only
//	                                                with REFLECTOR_DEBUG_ENDPOINTS=true; 404 otherwise)
//	POST /evaluate-repository?namespace=N&name=R    evaluate the ImagePolicies of ImageRepository N/R
//	                                                (the same)
//	POST / (any other path)                         CloudEvents, binary or structured mode:
//	    io.imagereflector.tags.changed.v1           the scan function: evaluate the repository's policies
//	    io.imagereflector.policy.requested.v1       the cron reconciler: evaluate one policy
//	    dev.knative.apiserver.resource.add|update   ApiServerSource: evaluate a new or changed policy
//	    anything else                               202, ignored
//
// Open builds it from the environment, on the first request under functions-framework-go and
// when cmd/policy starts:
//
//	KUBECONFIG            kubeconfig file; in-cluster configuration without it
//	REFLECTOR_STORE_DIR   the Badger tag store directory, opened read-only (required)
//	K_SINK                where LatestChanged events go (Knative SinkBinding); none without it
//	K_SINK_TOKEN_FILE     the token each LatestChanged event carries, for K_SINK's audience
//	                      (default /oidc/token, where the SinkBinding mounts it)
//	REFLECTOR_EVENTS_ADDR notification-controller's event receiver (Flux's --events-addr, e.g.
//	                      http://notification-controller.flux-system.svc.cluster.local./): each
//	                      evaluation's Event is also posted there as a Flux event, so Flux Alerts
//	                      on ImagePolicies fire; none without it
//	REFLECTOR_METRICS_ADDR  where cmd/policy serves /metrics (default :9095; "off": none)
//	REFLECTOR_LISTEN_HOST   the address cmd/policy serves $PORT on (default: every interface)
//	REFLECTOR_OIDC_AUDIENCE   require senders to present a ServiceAccount token for this audience
//	                      (Knative Eventing's authentication-oidc; knative/ sets reflector-policy);
//	                      unset, any caller is served: only for tests of the function alone
//	REFLECTOR_OIDC_NAMESPACES and a ServiceAccount of one of these namespaces (comma-separated)
//	REFLECTOR_DEBUG_ENDPOINTS "true": serve /evaluate and /evaluate-repository, which read and
//	                      write any namespace's policies on request; needs REFLECTOR_OIDC_AUDIENCE,
//	                      so that only a proven caller reaches them. Off by default, and in knative/
//	REFLECTOR_FEATURE_GATES, REFLECTOR_DEFAULT_SERVICE_ACCOUNT  as for the scan function: how
//	                      digest reflection (a HEAD of the latest tag) logs in to cloud registries
//	REFLECTOR_NO_CROSS_NAMESPACE_REFS  "true": Flux's --no-cross-namespace-refs; an ImagePolicy
//	                      whose imageRepositoryRef names another namespace is refused
//	                      (AccessDenied, Stalled) whatever that repository's accessFrom says
//	                      (default false: accessFrom decides)
//	REFLECTOR_SIGSTORE_TUF_URL    the TUF repository that the Sigstore trusted root of keyless
//	                      verification without a secretRef comes from (default: the public-good
//	                      one, https://tuf-repo-cdn.sigstore.dev), e.g. a mirror
//	REFLECTOR_SIGSTORE_TUF_ROOT   path of that repository's initial root.json (default: the
//	                      public-good root embedded in sigstore-go)
//	REFLECTOR_SIGSTORE_TUF_CACHE  a writable directory for the TUF client's cache (default:
//	                      memory only); fetched on first need, reused for a day
//	REFLECTOR_REGISTRY_RATE, REFLECTOR_REGISTRY_BURST  as for the scan function: the requests per
//	                      second to one registry host (default 10) of digest reflection and of
//	                      signature verification, which costs a signed push three to five
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/cloudauth"
	// ECR logins (spec.provider aws); the cron reconciler links cloudauth without them.
	_ "github.com/imagereflector/reflector/internal/cloudauth/awslogin"
	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/signature"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/tokenreview"
	"github.com/imagereflector/reflector/internal/trace"
)

// Target is the name under which the policy function registers with functions-framework-go,
// and under which Open's Function holds its handler.
const Target = "policy"

func init() {
	host := function.NewHost(Target, function.DefaultTimeouts, nil, Open)
	functions.HTTP(Target, host.Handler(Target))
}

// Open builds the policy function from the environment, as cmd/policy and a
// functions-framework-go host serve it, both passing function.Logger's logger. Its Close closes
// the recorder and the tag store. log nil means slog.Default().
func Open(log *slog.Logger) (*function.Function, error) {
	d, err := FromEnv()
	if err != nil {
		return nil, err
	}
	d.Log = log
	h := NewHandler(d)
	// Once per process, beside its first requests rather than before them.
	go checkPolicySchema(d)
	return &function.Function{
		Handlers: map[string]http.Handler{Target: h},
		Close:    func(context.Context) error { return h.Close() },
	}, nil
}

// checkPolicySchema says, in the log, a metric and an Event, when the served ImagePolicy CRD
// lacks spec.verify (reconcile.CheckPolicySchema).
func checkPolicySchema(d *Deps) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := reconcile.CheckPolicySchema(ctx, d.Kube, d.Recorder, log); err != nil {
		log.Warn("cannot tell whether the ImagePolicy CRD serves spec.verify", "error", redact.String(err.Error()))
	}
}

// Deps are what the policy function works with.
type Deps struct {
	Kube     *kube.Client
	Registry *registry.Client
	// Store is the tag store; open it read-only.
	Store *store.Store
	// Sink receives LatestChanged events; nil sends none.
	Sink *events.Sender
	// Recorder writes Kubernetes Events; nil writes none.
	Recorder *kube.Recorder
	// Log receives one line per request and per evaluation; nil means slog.Default().
	Log *slog.Logger
	// Senders verifies the token of each request but /healthz; nil accepts every request.
	Senders *tokenreview.Verifier
	// DebugEndpoints serves /evaluate and /evaluate-repository; FromEnv sets it only behind
	// Senders.
	DebugEndpoints bool
	// Sigstore fetches the trusted root of keyless verification without a secretRef; nil
	// leaves such policies Stalled as unsupported.
	Sigstore *signature.TUFRoot
	// Policies holds the ImagePolicies as a watch delivers them, indexed by
	// reconcile.RepositoryIndex, so that an event finds its repository's policies without a
	// list call; what it does not hold, and everything while it has not had its first listing
	// or when it is nil, is listed consistently.
	Policies *kube.Cache[*v1.ImagePolicy]
	// Repositories holds the ImageRepositories as a watch delivers them, from which the
	// policies of a repository's own namespace are advanced by a delta without a read of the
	// repository (reconcile.Evaluator.Repositories); nil reads it at every event.
	Repositories *kube.Cache[*v1.ImageRepository]
	// NoCrossNamespaceRefs refuses ImagePolicies that refer to another namespace
	// (reconcile.Evaluator.NoCrossNamespaceRefs).
	NoCrossNamespaceRefs bool
}

// FromEnv builds Deps from the environment described in the package comment.
func FromEnv() (*Deps, error) {
	env, err := function.FromEnv(events.SourcePolicy)
	if err != nil {
		return nil, err
	}
	cloud, err := cloudauth.FromEnv()
	if err != nil {
		return nil, err
	}
	sigstore, err := signature.TUFFromEnv()
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
	debug, err := debugEndpoints(os.Getenv("REFLECTOR_DEBUG_ENDPOINTS"), env.Senders != nil)
	if err != nil {
		return nil, err
	}
	noCross, err := noCrossNamespaceRefsFromEnv()
	if err != nil {
		return nil, err
	}
	d := &Deps{
		Kube:     env.Kube,
		Registry: registry.New(append([]registry.Option{registry.WithCloudAuth(cloud), registry.WithEgress(guard)}, limit...)...),
		Store:    store.New(env.StoreDir, store.ReadOnly()),
		Sink:     env.Sink,
		Recorder: kube.NewRecorder(env.Kube, "reflector-policy", kube.PostingTo(env.FluxEvents)),
		Senders:  env.Senders,
		Sigstore: sigstore,

		DebugEndpoints:       debug,
		NoCrossNamespaceRefs: noCross,
	}
	d.Policies = kube.NewCache(env.Kube.Policies, map[string]func(*v1.ImagePolicy) string{
		reconcile.RepositoryIndex: reconcile.PolicyRepository,
	})
	d.Repositories = kube.NewCache[*v1.ImageRepository](env.Kube.Repositories, nil)
	// Until their first listings have arrived, events read from the apiserver.
	d.Policies.Start(context.Background())
	d.Repositories.Start(context.Background())
	return d, nil
}

// debugEndpoints reads REFLECTOR_DEBUG_ENDPOINTS: the endpoints that evaluate any object on
// request are served only when asked for, and only to callers that prove who they are.
func debugEndpoints(v string, proven bool) (bool, error) {
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("REFLECTOR_DEBUG_ENDPOINTS: %w", err)
	}
	if on && !proven {
		return false, errors.New("REFLECTOR_DEBUG_ENDPOINTS=true needs REFLECTOR_OIDC_AUDIENCE: the endpoints are served only to a proven caller")
	}
	return on, nil
}

// noCrossNamespaceRefsFromEnv reads REFLECTOR_NO_CROSS_NAMESPACE_REFS: false when unset, and an
// error for a value that is not a boolean, so that a lockdown the admin misspelled is not
// silently off.
func noCrossNamespaceRefsFromEnv() (bool, error) {
	v := strings.TrimSpace(os.Getenv("REFLECTOR_NO_CROSS_NAMESPACE_REFS"))
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("REFLECTOR_NO_CROSS_NAMESPACE_REFS: %q is not true or false", v)
	}
	return on, nil
}

// newImageVerifier checks signatures with internal/signature, which only this function links,
// keyless ones without a secretRef under the trusted root that sigstore fetches.
func newImageVerifier(sigstore *signature.TUFRoot) reconcile.NewImageVerifier {
	var opts []signature.Option
	if sigstore != nil {
		opts = append(opts, signature.WithTUFRoot(sigstore))
	}
	return func(spec *v1.OCIRepositoryVerification, secret map[string][]byte) (reconcile.ImageVerifier, error) {
		v, err := signature.New(spec, secret, opts...)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
}

// Handler is the policy function's HTTP handler; the package comment lists what it answers.
type Handler struct {
	deps *Deps
	ev   *reconcile.Evaluator
	log  *slog.Logger
	mux  *http.ServeMux
}

// NewHandler returns the function's handler over d.
func NewHandler(d *Deps) *Handler {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	ev := &reconcile.Evaluator{
		Kube: d.Kube, Store: d.Store, Registry: d.Registry, Recorder: d.Recorder, Log: log,
		Verifier: newImageVerifier(d.Sigstore), NoCrossNamespaceRefs: d.NoCrossNamespaceRefs,
	}
	// A nil pointer in an interface would be non-nil; leave such fields unset instead.
	if d.Sink != nil {
		ev.Sink = d.Sink
	}
	if d.Policies != nil {
		ev.Policies = d.Policies
	}
	if d.Repositories != nil {
		ev.Repositories = d.Repositories
	}
	h := &Handler{deps: d, ev: ev, log: log, mux: http.NewServeMux()}
	work := http.NewServeMux()
	if d.DebugEndpoints {
		work.HandleFunc("POST /evaluate", h.evaluate)
		work.HandleFunc("POST /evaluate-repository", h.evaluateRepository)
	} else {
		// Not CloudEvents either: a caller learns that the endpoint is off.
		for _, path := range []string{"/evaluate", "/evaluate-repository"} {
			work.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "not served: set REFLECTOR_DEBUG_ENDPOINTS=true to serve it", http.StatusNotFound)
			})
		}
	}
	work.Handle("/", events.Handler(h.handleEvent))
	h.mux.HandleFunc("/healthz", function.Healthz)
	h.mux.Handle("/", d.Senders.Require(work))
	return h
}

// ServeHTTP routes a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h.mux.ServeHTTP(w, req)
}

// Close closes the recorder and the tag store, so that the next process needs no log replay.
// Call it after the server has stopped taking requests.
func (h *Handler) Close() error {
	h.deps.Policies.Stop()
	h.deps.Repositories.Stop()
	h.deps.Recorder.Shutdown()
	return h.deps.Store.Close()
}

// evaluate serves POST /evaluate?namespace=&name=.
func (h *Handler) evaluate(w http.ResponseWriter, req *http.Request) {
	ns, name, ok := objectParams(w, req)
	if !ok {
		return
	}
	out, err := h.ev.Evaluate(trace.Continue(req.Context(), req.Header.Get(trace.Header)), ns, name)
	respond(w, out, err)
}

// evaluateRepository serves POST /evaluate-repository?namespace=&name=.
func (h *Handler) evaluateRepository(w http.ResponseWriter, req *http.Request) {
	ns, name, ok := objectParams(w, req)
	if !ok {
		return
	}
	outs, err := h.ev.EvaluateRepository(trace.Continue(req.Context(), req.Header.Get(trace.Header)), ns, name)
	if outs == nil {
		outs = []reconcile.PolicyOutcome{}
	}
	respond(w, outs, err)
}

func objectParams(w http.ResponseWriter, req *http.Request) (ns, name string, ok bool) {
	q := req.URL.Query()
	ns, name = q.Get("namespace"), q.Get("name")
	if err := events.CheckObject(ns, name); err != nil {
		http.Error(w, "the namespace and name query parameters: "+err.Error(), http.StatusBadRequest)
		return "", "", false
	}
	return ns, name, true
}

// respond writes v as JSON, with 500 when err is set: the evaluator could not do its work and
// the caller should try again.
func respond(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	code := http.StatusOK
	body := any(v)
	if err != nil {
		code = http.StatusInternalServerError
		body = struct {
			Error   string `json:"error"`
			Outcome any    `json:"outcome"`
		}{redact.String(err.Error()), v}
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
