// Package events defines the CloudEvents that reflector's processes exchange, and sends them.
// The scan function announces changed tag sets, the policy function announces new latest images,
// and the cron reconciler requests scans and evaluations; Knative's SinkBinding tells each sender
// where to deliver through K_SINK.
package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/metrics"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
)

// Event types. The version suffix changes only with an incompatible change of the data.
const (
	// TypeScanRequested asks the scan function to scan an ImageRepository; data is ObjectRef.
	TypeScanRequested = "io.imagereflector.scan.requested.v1"
	// TypeTagsChanged tells the policy function that an ImageRepository's tags changed; data is
	// TagsChanged.
	TypeTagsChanged = "io.imagereflector.tags.changed.v1"
	// TypePolicyRequested asks the policy function to evaluate an ImagePolicy; data is ObjectRef.
	TypePolicyRequested = "io.imagereflector.policy.requested.v1"
	// TypeLatestChanged tells whoever automates updates that an ImagePolicy's latestRef changed;
	// data is LatestChanged.
	TypeLatestChanged = "io.imagereflector.latest.changed.v1"
)

// Knative ApiServerSource event types in Resource mode, the mode knative/ configures: the data is
// the whole object.
const (
	TypeAPIServerAdd    = "dev.knative.apiserver.resource.add"
	TypeAPIServerUpdate = "dev.knative.apiserver.resource.update"
	TypeAPIServerDelete = "dev.knative.apiserver.resource.delete"
)

// Sources of the events, one per process kind.
const (
	SourceScan   = "/reflector/scan"
	SourcePolicy = "/reflector/policy"
	SourceCron   = "/reflector/cron"
)

// ObjectRef names one object.
type ObjectRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Reason says why the object is due, for logs.
	Reason string `json:"reason,omitempty"`
}

// TagsChanged announces a new tag set of an ImageRepository.
type TagsChanged struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Revision  string `json:"revision"`
	// Delta, when set, tells how the new set was made from an earlier one: a scan that added
	// pushed tags to a stored list says which. A full listing sends none.
	Delta *TagsDelta `json:"delta,omitempty"`
	// Attached names the images (manifest digests, sha256:<hex>) that pushed tags of the
	// referrer and attachment kinds (cosign's sha256-<hex>.sig, .att, .sbom, and the OCI 1.1
	// referrers tag schema's sha256-<hex>) refer to, whether or not the stored list holds those
	// tags: a signature pushed after its image changes what a verifying policy may select.
	// A trigger only: the policy function asks the registry for the signatures themselves.
	Attached []string `json:"attached,omitempty"`
}

// MaxAttached is the most digests a TagsChanged event names in Attached.
const MaxAttached = 16

// AttachedDigests returns the digests of c.Attached in the form a scan sends them
// (sha256:<64 lowercase hex>), at most MaxAttached, leaving out any other entry.
func (c *TagsChanged) AttachedDigests() []string {
	var out []string
	for _, d := range c.Attached {
		if len(out) == MaxAttached {
			break
		}
		if hex, ok := strings.CutPrefix(d, "sha256:"); ok && isHex64(hex) {
			out = append(out, d)
		}
	}
	return out
}

// isHex64 tells whether s is 64 lowercase hexadecimal digits.
func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// MaxDeltaTags is the most tags a TagsDelta carries: more than a scan adds at once when it
// confirms pushed tags one by one instead of listing them.
const MaxDeltaTags = 16

// TagsDelta is an addition to a stored tag list: the list of revision From, listed for the
// identity UID, Image and Listing (store.Identity), plus Added, is the list of the event's
// Revision. Proof signs all of it with the store directory's key (store.Store.ProofKey), so
// that a receiver may apply the delta as the store's own word; a delta that does not verify is
// only a trigger.
type TagsDelta struct {
	UID     string     `json:"uid"`
	Image   string     `json:"image"`
	Listing string     `json:"listing,omitempty"`
	From    string     `json:"from"`
	Added   []AddedTag `json:"added"`
	Proof   string     `json:"proof,omitempty"`
}

// AddedTag is a tag a scan added, with the digest the registry confirmed it with.
type AddedTag struct {
	Tag    string `json:"tag"`
	Digest string `json:"digest,omitempty"`
}

// LatestChanged announces a new latest image of an ImagePolicy.
type LatestChanged struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Previous  *v1.ImageRef `json:"previous,omitempty"`
	Latest    *v1.ImageRef `json:"latest"`
}

// Sender delivers events to one sink over HTTP in binary mode.
type Sender struct {
	client cloudevents.Client
	target string
	source string
}

// SinkTokenFile is where Knative Eventing's SinkBinding mounts the OIDC token for the sink's
// audience when authentication-oidc is on; $K_SINK_TOKEN_FILE overrides it.
const SinkTokenFile = "/oidc/token"

// SenderOption configures NewSender.
type SenderOption func(*senderConfig)

type senderConfig struct {
	tokenFile string
}

// WithTokenFile presents the token in path instead of the sink token file: a projected
// ServiceAccount token for the audience of a target that is not $K_SINK, such as the cron
// reconciler's --scan-url. An empty path keeps the sink token file.
func WithTokenFile(path string) SenderOption {
	return func(c *senderConfig) {
		if path != "" {
			c.tokenFile = path
		}
	}
}

// NewSender returns a Sender that delivers to target as source. An empty target gives a nil
// Sender, whose Send does nothing: a process without a sink still works, and the cron reconciler
// catches up with what it would have announced.
//
// When the sink token file exists (SinkTokenFile, or $K_SINK_TOKEN_FILE, or WithTokenFile's),
// every delivery carries its content as a bearer token: the receiver then knows who sent the
// event. The file is read for each delivery, because Knative and the kubelet renew it in place.
func NewSender(target, source string, httpClient *http.Client, opts ...SenderOption) (*Sender, error) {
	if target == "" {
		return nil, nil
	}
	// The SDK's own error would quote the target, credentials and all.
	if u, err := url.Parse(target); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("target %q is not an http:// or https:// URL", redact.Address(target))
	}
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 10 * time.Second}
	}
	cfg := senderConfig{tokenFile: os.Getenv("K_SINK_TOKEN_FILE")}
	if cfg.tokenFile == "" {
		cfg.tokenFile = SinkTokenFile
	}
	for _, o := range opts {
		o(&cfg)
	}
	withToken := *httpClient
	base := withToken.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	withToken.Transport = &bearerFile{base: base, path: cfg.tokenFile}
	httpClient = &withToken
	p, err := cloudevents.NewHTTP(cloudevents.WithTarget(target), cehttp.WithClient(*httpClient))
	if err != nil {
		return nil, err
	}
	c, err := cloudevents.NewClient(p, cloudevents.WithUUIDs(), cloudevents.WithTimeNow())
	if err != nil {
		return nil, err
	}
	return &Sender{client: c, target: target, source: source}, nil
}

// bearerFile adds the token in path, when the file exists, to each request as a bearer token.
type bearerFile struct {
	base http.RoundTripper
	path string
}

func (b *bearerFile) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := os.ReadFile(b.path)
	if err != nil || len(bytes.TrimSpace(token)) == 0 {
		return b.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	return b.base.RoundTrip(req)
}

// Target returns where the Sender delivers, for messages: its userinfo is masked. It is ""
// for a nil Sender.
func (s *Sender) Target() string {
	if s == nil {
		return ""
	}
	return redact.Address(s.target)
}

// ErrNotAcknowledged wraps a delivery that the sink refused or that never reached it.
var ErrNotAcknowledged = errors.New("event not acknowledged")

// Send delivers one event with the given type, subject and JSON data, and returns an error
// wrapping ErrNotAcknowledged unless the sink acknowledged it. The event carries the trace of
// ctx in the distributed tracing extension (traceparent), with this process as the parent; a
// ctx without a trace starts one.
func (s *Sender) Send(ctx context.Context, ceType, subject string, data any) error {
	if s == nil {
		return nil
	}
	e := cloudevents.NewEvent()
	e.SetType(ceType)
	e.SetSource(s.source)
	e.SetSubject(subject)
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return err
	}
	tc, ok := trace.From(ctx)
	if !ok {
		tc = trace.New()
	}
	e.SetExtension(trace.Header, tc.String())
	res := s.client.Send(ctx, e)
	acked := cloudevents.IsACK(res)
	metrics.RecordEventSent(ceType, acked)
	if !acked {
		// The result of a failed request quotes the target URL.
		return fmt.Errorf("%w by %s: %s %s: %s", ErrNotAcknowledged, s.Target(), ceType, subject, redact.String(fmt.Sprint(res)))
	}
	return nil
}

// CheckObject refuses a namespace that is not a DNS label or a name that is not a DNS
// subdomain, the names Kubernetes allows for the objects reflector handles, so that an event can
// name nothing else and nothing longer. The error wraps ErrRejected.
func CheckObject(namespace, name string) error {
	if namespace == "" || name == "" {
		return fmt.Errorf("%w: namespace and name are required", ErrRejected)
	}
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return fmt.Errorf("%w: namespace %q: %s", ErrRejected, Brief(namespace), msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%w: name %q: %s", ErrRejected, Brief(name), msgs[0])
	}
	return nil
}
