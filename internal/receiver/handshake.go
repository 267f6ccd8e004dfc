package receiver

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/time/rate"

	"github.com/imagereflector/reflector/internal/metrics"
)

// The CloudEvents webhook specification's abuse protection: before it delivers, a sender such as
// Azure Event Grid asks the endpoint with an OPTIONS request whether it wants its events.
const (
	// requestOriginHeader names the sender asking, a DNS name such as eventgrid.azure.net.
	requestOriginHeader = "WebHook-Request-Origin"
	// allowedOriginHeader grants that sender delivery; allowedRateHeader says at what rate, in
	// requests a minute or "*".
	allowedOriginHeader = "WebHook-Allowed-Origin"
	allowedRateHeader   = "WebHook-Allowed-Rate"
)

// originPattern is a DNS name, the form the specification gives WebHook-Request-Origin;
// maxOriginLength is the longest one.
var originPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$`)

const maxOriginLength = 253

// handshake answers the CloudEvents webhook handshake on a path of a provider whose sender makes
// it (webhook.Handshake): 200 with WebHook-Allowed-Origin naming the origin that asked and
// WebHook-Allowed-Rate the receiver's rate, or 400 when WebHook-Request-Origin is missing or not
// a DNS name. It needs no token: the sender may send none with it, and consent changes nothing,
// since every delivery that follows still needs the receiver's token. For the same reason it
// does not look for the receiver's Secret and is answered alike whether the receiver exists or
// not, so it tells no one which namespaces have one. It reads no body, answers a callback
// (WebHook-Request-Callback) by not calling it, and costs the remote address a token of its
// budget of unauthenticated requests, like a delivery that fails authentication: 429 when that
// is spent.
func (r *Receiver) handshake(w http.ResponseWriter, req *http.Request, res result) result {
	addr := remoteHost(req.RemoteAddr)
	if !r.unauthenticated.allow(addr) {
		w.Header().Set("Retry-After", "1")
		res.skipped = metrics.WebhookThrottled
		return res.with(http.StatusTooManyRequests, "too many unauthenticated requests from this address; retry later")
	}
	r.unauthenticated.charge(addr)
	w.Header().Set("Allow", http.MethodOptions+", "+http.MethodPost)
	origin := strings.TrimSpace(req.Header.Get(requestOriginHeader))
	if len(origin) > maxOriginLength || !originPattern.MatchString(origin) {
		return res.with(http.StatusBadRequest, requestOriginHeader+" is missing or not a DNS name")
	}
	w.Header().Set(allowedOriginHeader, origin)
	w.Header().Set(allowedRateHeader, r.allowedRate())
	res.skipped = metrics.WebhookHandshake
	return res.with(http.StatusOK, fmt.Sprintf("handshake: deliveries from %s allowed", origin))
}

// allowedRate is the receiver's rate limit in requests a minute, as WebHook-Allowed-Rate says
// it: "*" when there is none.
func (r *Receiver) allowedRate() string {
	perMinute := float64(r.cfg.rate) * 60
	if r.cfg.rate == rate.Inf || perMinute >= 1<<31 {
		return "*"
	}
	return strconv.Itoa(max(1, int(perMinute)))
}
