package registry

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/redact"
)

// Error is a failure classified into the Flux condition reason an ImageRepository reports for it.
// Its message carries the registry's own error code and message when the registry sent one;
// errors.As with a *transport.Error reaches them programmatically.
type Error struct {
	// Reason is one of v1.AuthenticationFailedReason, v1.ReadOperationFailedReason,
	// v1.ImageURLInvalidReason, v1.UnsupportedProviderReason, v1.FeatureGateDisabledReason,
	// v1.TransportNotTrustedReason and v1.AddressNotAllowedReason.
	Reason string
	// Err is the underlying failure.
	Err error
}

// Error returns the message of the underlying failure without URL userinfo, with what is not
// printable escaped, and at most redact.MaxText bytes long (redact.Text): net/http and
// go-containerregistry quote request URLs in their errors, go-containerregistry puts up to
// 64 KiB of a registry's error body in them, and every registry failure reaches statuses,
// Events and logs through here.
func (e *Error) Error() string { return redact.Text(e.Err.Error()) }

// Unwrap returns the underlying failure.
func (e *Error) Unwrap() error { return e.Err }

// ErrTagLimit is wrapped by the error of a listing that found more tags than the Client's
// limit (WithMaxTags): such a repository is reported, never stored truncated.
var ErrTagLimit = errors.New("tag limit exceeded")

// Reason returns the condition reason of err: the Reason of an *Error in its chain, else
// v1.ReadOperationFailedReason; "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return v1.ReadOperationFailedReason
}

// Stalled reports whether err cannot go away without a change of the ImageRepository's spec, so
// the object should be marked Stalled rather than retried.
func Stalled(err error) bool {
	switch Reason(err) {
	case v1.ImageURLInvalidReason, v1.UnsupportedProviderReason, v1.FeatureGateDisabledReason, v1.TransportNotTrustedReason:
		return true
	}
	return false
}

// classify wraps err in an *Error whose reason follows from the registry's answer: refused
// credentials are AuthenticationFailed, everything else (unknown names, server errors, timeouts,
// malformed answers) is ReadOperationFailed. An err that is already classified is kept. A
// connection that the egress guard refused is AddressNotAllowed, and its message is the
// refusal's alone: the rest of the chain quotes the URL that was refused, a redirect's target
// among them.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if refused, ok := errors.AsType[*egress.RefusedError](err); ok {
		return &Error{Reason: v1.AddressNotAllowedReason, Err: refused}
	}
	if ssrfRefusal(err) {
		return &Error{Reason: v1.AddressNotAllowedReason, Err: &egress.RefusedError{}}
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	reason := v1.ReadOperationFailedReason
	if authFailure(err) {
		reason = v1.AuthenticationFailedReason
	}
	return &Error{Reason: reason, Err: err}
}

// ssrfRefusal reports whether err is go-containerregistry's own refusal of an address literal,
// which comes before the guard sees the connection: a redirect to a private or link-local
// address, or a token realm there. go-containerregistry gives these no type of their own, so
// their wording is what tells them (TestIntegrationEgressRefusesInternalAddresses pins it); they
// quote the address, which must not reach a status.
func ssrfRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SSRF protection") || strings.Contains(msg, "is a private or link-local address")
}

// authFailure reports whether the registry, or the proxy, refused the request's credentials.
func authFailure(err error) bool {
	terr, ok := errors.AsType[*transport.Error](err)
	if !ok {
		// net/http reports a proxy's refusal of a CONNECT only as the status text.
		return strings.Contains(err.Error(), http.StatusText(http.StatusProxyAuthRequired))
	}
	switch terr.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
		return true
	}
	for _, d := range terr.Errors {
		if d.Code == transport.UnauthorizedErrorCode || d.Code == transport.DeniedErrorCode {
			return true
		}
	}
	return false
}

// timedOut reports whether err is the scan's deadline running out rather than a caller's
// cancellation.
func timedOut(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded)
}
