// Package webhook turns registry push notifications into Events: one parser and verifier per
// source (registry webhooks over HTTP, registry CloudEvents), all producing the same normalised,
// canonicalised shape. It is pure: no network, no Kubernetes, no store. Reading the request,
// limiting its size, deduplicating and rate limiting are the caller's job.
//
// HTTP providers, by how a request is authenticated with the receiver's secret:
//
//	github             X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
//	generic            X-Signature: sha256=<hex HMAC-SHA256 of the body>
//	nexus              X-Nexus-Webhook-Signature: <hex HMAC-SHA1 of the body>
//	jfrog              X-JFrog-Event-Auth: <hex HMAC-SHA256 of the body> or the token
//	harbor, acr,       Authorization: <token> or Bearer <token>
//	distribution, ecr,
//	eventgrid
//	dockerhub, quay,   ?token=<token>
//	gar
//
// Each provider's file says which payload fields make the Event and what it assumes.
package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Errors returned by Parse and ParseCloudEvent. Every error wraps exactly one of them, so an HTTP
// receiver can map it to a status code; the error text is one line that is safe to return to
// the sender and to log (it never contains a secret).
var (
	// ErrUnknownProvider means no provider has the requested name (HTTP 404).
	ErrUnknownProvider = errors.New("unknown provider")
	// ErrUnauthenticated means the signature or token is missing or wrong (HTTP 401). Nothing
	// in the body has been looked at.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrMalformed means the request is authentic but cannot be understood (HTTP 400).
	ErrMalformed = errors.New("malformed request")
	// ErrIgnored means the request is authentic and well formed but reports nothing that
	// changes a tag list, such as a pull, a delete, a blob upload or an untagged push (HTTP 200
	// with the error text as the reason).
	ErrIgnored = errors.New("ignored")
)

// Request is the part of an HTTP delivery that providers read. The receiver fills it from the
// *http.Request after enforcing its body size limit.
type Request struct {
	// Header holds the request headers, with canonical keys as net/http sets them.
	Header http.Header
	// Query holds the URL query parameters; a token travelling in ?token= is read from here.
	Query url.Values
	// Body is the raw request body, exactly as signed by the sender.
	Body []byte
}

// verifier authenticates a request with the receiver's secret. It must not trust the body.
type verifier func(req Request, secret []byte) error

// parser turns an authenticated request into events.
type parser func(req Request) ([]Event, error)

type provider struct {
	verify verifier
	parse  parser
	// byID marks a provider whose events carry the sender's own ids for every delivery, so
	// that a delivery is recognised by them rather than by its body (see DedupByID).
	byID bool
	// handshake marks a provider whose sender validates the endpoint with the CloudEvents
	// webhook handshake (see Handshake).
	handshake bool
}

// providers is the registry of HTTP providers by the name used in the receiver's URL.
var providers = map[string]provider{
	"github":       {verify: githubSignature, parse: parseGitHub},
	"nexus":        {verify: nexusSignature, parse: parseNexus},
	"jfrog":        {verify: jfrogAuth, parse: parseJFrog},
	"harbor":       {verify: authorizationToken, parse: parseHarbor},
	"acr":          {verify: authorizationToken, parse: parseACR},
	"distribution": {verify: authorizationToken, parse: parseDistribution},
	"ecr":          {verify: authorizationToken, parse: parseECR},
	"eventgrid":    {verify: authorizationToken, parse: parseEventGridDelivery, byID: true, handshake: true},
	"dockerhub":    {verify: queryToken, parse: parseDockerHub},
	"quay":         {verify: queryToken, parse: parseQuay},
	"gar":          {verify: queryToken, parse: parseGAR},
	"generic":      {verify: genericSignature, parse: parseGeneric},
}

// Known reports whether provider names an HTTP provider that Parse accepts.
func Known(provider string) bool {
	_, ok := providers[provider]
	return ok
}

// DedupByID reports whether a delivery of provider is recognised by the DeliveryIDs of its
// events, which are the sender's own ids, rather than by its body: a sender that retries may
// send the same events in another body (another batch).
func DedupByID(provider string) bool {
	return providers[provider].byID
}

// Handshake reports whether provider's sender validates the endpoint before it delivers, with
// the CloudEvents webhook abuse-protection handshake: an HTTP OPTIONS request that carries
// WebHook-Request-Origin, and no token.
func Handshake(provider string) bool {
	return providers[provider].handshake
}

// Providers returns the names of the HTTP providers, sorted.
func Providers() []string {
	names := make([]string, 0, len(providers))
	for name := range providers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Parse authenticates req as a delivery from provider with the receiver's secret and, only
// then, parses its body. It returns at least one Event, or an error wrapping ErrUnknownProvider,
// ErrUnauthenticated, ErrMalformed or ErrIgnored. An empty secret authenticates nothing.
func Parse(provider string, req Request, secret []byte) ([]Event, error) {
	p, ok := providers[provider]
	if !ok {
		return nil, fmt.Errorf("%w %s", ErrUnknownProvider, quote(provider))
	}
	if len(secret) == 0 {
		return nil, fmt.Errorf("%s: %w: the receiver has no secret configured", provider, ErrUnauthenticated)
	}
	if err := p.verify(req, secret); err != nil {
		return nil, fmt.Errorf("%s: %w", provider, err)
	}
	events, err := p.parse(req)
	if err == nil && len(events) == 0 {
		err = ignored("no events")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", provider, err)
	}
	return events, nil
}

func unauthenticated(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnauthenticated, fmt.Sprintf(format, args...))
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func ignored(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrIgnored, fmt.Sprintf(format, args...))
}

// quote renders a sender-controlled value for an error message: quoted, so the message stays
// one line, and shortened, so a large body cannot make a large message.
func quote(s string) string {
	const limit = 96
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return strconv.Quote(s)
}

// skipped collects why the entries of a multi-event payload were left out, so that a payload
// with nothing left can say why in one line.
type skipped []string

// maxSkipped bounds the reasons kept, so that a payload of many odd entries still makes a
// short message.
const maxSkipped = 3

func (s *skipped) add(reason string) {
	if len(*s) <= maxSkipped && !slices.Contains(*s, reason) {
		*s = append(*s, reason)
	}
}

func (s skipped) err(total int, what string) error {
	if len(s) == 0 {
		return ignored("no %s", what)
	}
	if len(s) > maxSkipped {
		s = append(s[:maxSkipped:maxSkipped], "...")
	}
	return ignored("none of %d %s applies (%s)", total, what, strings.Join(s, "; "))
}
