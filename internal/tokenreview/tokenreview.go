// Package tokenreview proves who sent a request to a cluster-local listener: the bearer token
// that Knative Eventing's OIDC sender authentication (feature authentication-oidc) attaches, a
// ServiceAccount token issued for the subscriber's audience, checked with the apiserver's
// TokenReview API. A request without a token the apiserver accepts for that audience never
// reaches the handler.
//
// Each distinct token costs one TokenReview; an accepted token is remembered until it expires
// or for CacheTTL, whichever is sooner, and a refused one for RefusedTTL, both in bounded maps.
// Before a review, the token's signature is checked against the keys that sign the cluster's
// ServiceAccount tokens, which the apiserver publishes for OIDC discovery: a token they did not
// sign, or for another audience, is refused without asking the apiserver, so forged tokens cost
// only the check. Reviews of tokens not yet known are rate limited as a whole, which bounds the
// apiserver's cost when the keys cannot be read.
package tokenreview

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"

	"github.com/imagereflector/reflector/internal/kube"
)

// Defaults of a Verifier.
const (
	// CacheTTL is the longest an accepted token is remembered.
	CacheTTL = 5 * time.Minute
	// RefusedTTL is how long a refused token is answered 401 without asking again.
	RefusedTTL = 30 * time.Second
	// ReviewRate and ReviewBurst bound the TokenReviews of tokens not remembered.
	ReviewRate  = 20
	ReviewBurst = 40
	// maxEntries bounds each of the accepted and refused maps.
	maxEntries = 1024
	// maxTokenBytes bounds the Authorization header read: ServiceAccount tokens are about 1 KiB.
	maxTokenBytes = 16 << 10
)

// ErrUnauthenticated wraps every refusal of a sender.
var ErrUnauthenticated = errors.New("unauthenticated")

// Verifier checks bearer tokens for one audience. It is safe for concurrent use.
type Verifier struct {
	client     *kube.Client
	audience   string
	namespaces []string
	now        func() time.Time
	limit      *rate.Limiter
	keys       *keySet

	mu       sync.Mutex
	accepted map[[32]byte]entry
	refused  map[[32]byte]time.Time
}

type entry struct {
	user    string
	expires time.Time
}

// Option configures New.
type Option func(*Verifier)

// WithNamespaces accepts only ServiceAccounts of these namespaces (system:serviceaccount:<ns>:...),
// such as the one where the Triggers that deliver to the function live. Without it any
// ServiceAccount token for the audience is accepted.
func WithNamespaces(namespaces ...string) Option {
	return func(v *Verifier) {
		for _, ns := range namespaces {
			if ns = strings.TrimSpace(ns); ns != "" {
				v.namespaces = append(v.namespaces, ns)
			}
		}
	}
}

// WithClock sets the clock of the caches.
func WithClock(now func() time.Time) Option { return func(v *Verifier) { v.now = now } }

// WithReviewRate sets how many TokenReviews of unknown tokens a second the Verifier makes.
func WithReviewRate(perSecond rate.Limit, burst int) Option {
	return func(v *Verifier) { v.limit = rate.NewLimiter(perSecond, burst) }
}

// New returns a Verifier of tokens for audience, reviewed by client's apiserver.
func New(client *kube.Client, audience string, opts ...Option) *Verifier {
	v := &Verifier{
		client:   client,
		audience: audience,
		now:      time.Now,
		limit:    rate.NewLimiter(ReviewRate, ReviewBurst),
		accepted: map[[32]byte]entry{},
		refused:  map[[32]byte]time.Time{},
	}
	if client != nil {
		v.keys = &keySet{fetch: client.ServiceAccountKeys}
	}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Audience returns the audience that tokens must be issued for.
func (v *Verifier) Audience() string { return v.audience }

// Require wraps h so that only requests whose bearer token Verify accepts reach it, with the
// token's user in their context (Sender); others get 401 (429 when the review budget is spent,
// 500 when the apiserver fails) and h never runs. A nil Verifier lets every request through.
func (v *Verifier) Require(h http.Handler) http.Handler {
	if v == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := v.Verify(r.Context(), r.Header.Get("Authorization"))
		switch {
		case err == nil:
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), senderKey{}, user)))
		case errors.Is(err, ErrUnauthenticated):
			w.Header().Set("WWW-Authenticate", `Bearer realm="reflector"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
		case errors.Is(err, errBusy), errors.Is(err, errUnknownKey):
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusTooManyRequests)
		default:
			http.Error(w, "cannot verify the sender's token", http.StatusInternalServerError)
		}
	})
}

type senderKey struct{}

// Sender returns the user (system:serviceaccount:<namespace>:<name>) whose token Require
// accepted for the request of ctx, and false for a request that no Verifier checked.
func Sender(ctx context.Context) (string, bool) {
	user, ok := ctx.Value(senderKey{}).(string)
	return user, ok && user != ""
}

var errBusy = errors.New("too many unverified tokens; retry later")

// Verify checks an Authorization header value ("Bearer <token>") and returns the user the token
// belongs to. The error wraps ErrUnauthenticated when the token is missing, malformed, refused
// by the apiserver, not for the audience, or of a ServiceAccount outside WithNamespaces. Error
// texts never contain the token.
func (v *Verifier) Verify(ctx context.Context, authorization string) (string, error) {
	if len(authorization) > maxTokenBytes {
		return "", fmt.Errorf("%w: Authorization header too long", ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", fmt.Errorf("%w: a bearer token for audience %q is required", ErrUnauthenticated, v.audience)
	}
	key := sha256.Sum256([]byte(token))
	now := v.now()
	v.mu.Lock()
	if e, ok := v.accepted[key]; ok && now.Before(e.expires) {
		v.mu.Unlock()
		return e.user, nil
	}
	if until, ok := v.refused[key]; ok && now.Before(until) {
		v.mu.Unlock()
		return "", fmt.Errorf("%w: the token was refused", ErrUnauthenticated)
	}
	v.mu.Unlock()
	user, err := v.checkAndReview(ctx, token, now)
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case err == nil:
		expires := now.Add(CacheTTL)
		if exp, ok := expiry(token); ok && exp.Before(expires) {
			expires = exp
		}
		put(v.accepted, key, entry{user: user, expires: expires}, now, func(e entry) time.Time { return e.expires })
	case errors.Is(err, ErrUnauthenticated):
		put(v.refused, key, now.Add(RefusedTTL), now, func(t time.Time) time.Time { return t })
	}
	return user, err
}

// checkAndReview asks the apiserver about a token that precheck lets through, within the review
// budget.
func (v *Verifier) checkAndReview(ctx context.Context, token string, now time.Time) (string, error) {
	if _, err := v.precheck(ctx, token, now); err != nil {
		return "", err
	}
	if !v.limit.Allow() {
		return "", errBusy
	}
	return v.review(ctx, token)
}

// precheck refuses, without asking the apiserver, a token that cannot be accepted: not a JWT,
// not for the audience, not signed by the cluster's keys, or, once the signature shows that its
// subject is genuine, of a ServiceAccount outside WithNamespaces. It tells whether the cluster's
// keys verified the signature; without them (none read) it lets every token through to the
// review.
func (v *Verifier) precheck(ctx context.Context, token string, now time.Time) (bool, error) {
	if v.keys == nil {
		return false, nil
	}
	t, err := parseJWT(token)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if !slices.Contains(t.audiences, v.audience) {
		return false, fmt.Errorf("%w: the token is not for audience %q", ErrUnauthenticated, v.audience)
	}
	signed, err := v.keys.verify(ctx, t, now)
	if err != nil {
		return false, err
	}
	if err := v.allowed(t.subject); err != nil && signed {
		return false, err
	}
	return signed, nil
}

// allowed refuses a user outside WithNamespaces.
func (v *Verifier) allowed(user string) error {
	if len(v.namespaces) == 0 {
		return nil
	}
	if ns, ok := serviceAccountNamespace(user); ok && slices.Contains(v.namespaces, ns) {
		return nil
	}
	return fmt.Errorf("%w: %s is not a ServiceAccount of %s", ErrUnauthenticated, user, strings.Join(v.namespaces, ", "))
}

// review asks the apiserver about token.
func (v *Verifier) review(ctx context.Context, token string) (string, error) {
	tr, err := v.client.TokenReviews.Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{v.audience}},
	})
	if err != nil {
		return "", fmt.Errorf("TokenReview: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		return "", fmt.Errorf("%w: the apiserver does not accept the token for audience %q", ErrUnauthenticated, v.audience)
	}
	if !slices.Contains(st.Audiences, v.audience) {
		return "", fmt.Errorf("%w: the token is not for audience %q", ErrUnauthenticated, v.audience)
	}
	user := st.User.Username
	if err := v.allowed(user); err != nil {
		return "", err
	}
	return user, nil
}

// serviceAccountNamespace returns the namespace of a ServiceAccount's user name.
func serviceAccountNamespace(user string) (string, bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", false
	}
	ns, name, ok := strings.Cut(rest, ":")
	return ns, ok && ns != "" && name != ""
}

// expiry reads the exp claim of a JWT the apiserver has already accepted; it only shortens how
// long the acceptance is remembered.
func expiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// put stores value under key, first dropping expired entries when the map is full, and
// everything when none had expired, so the map never exceeds maxEntries.
func put[V any](m map[[32]byte]V, key [32]byte, value V, now time.Time, expires func(V) time.Time) {
	if len(m) >= maxEntries {
		for k, v := range m {
			if !now.Before(expires(v)) {
				delete(m, k)
			}
		}
		if len(m) >= maxEntries {
			clear(m)
		}
	}
	m[key] = value
}
