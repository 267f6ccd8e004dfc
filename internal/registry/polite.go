package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/imagereflector/reflector/internal/metrics"
)

// politeTransport is the RoundTripper under go-containerregistry's authentication: every request,
// the /v2/ ping and token requests included, waits for its host's token bucket, and answers that
// ask for patience get it. go-containerregistry's own retry transport is never installed (scans
// hand it a *transport.Wrapper), so retries do not multiply, and it would ignore Retry-After.
type politeTransport struct {
	inner http.RoundTripper
	c     *Client
	// host is the registry host of the object the requests are made for: its bucket and its
	// metrics count every request, those that a redirect or a token endpoint sends to other
	// hosts included.
	host string
}

func (t *politeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	limiter := t.c.limiter(t.host)
	for attempt := 0; ; attempt++ {
		if err := limiter.Wait(ctx); err != nil {
			return nil, fmt.Errorf("waiting for the request rate limit of %s: %w", t.host, err)
		}
		resp, err := t.inner.RoundTrip(req)
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		metrics.RecordRegistryRequest(t.host, code)
		if !retriable(resp, err) || attempt >= t.c.maxRetries || (req.Body != nil && req.Body != http.NoBody) ||
			code >= http.StatusInternalServerError && ctx.Value(serverErrorsToCallerKey{}) != nil {
			return resp, err
		}
		wait, asked := t.backoff(attempt), false
		if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
			if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				wait, asked = d, true
			}
		}
		if deadline, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(deadline) {
			if asked {
				return nil, tooLongWait(resp, wait, time.Until(deadline))
			}
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		}
		if asked {
			metrics.RecordRetryAfter(t.host, wait)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// serverErrorsToCallerKey marks a request context whose server errors (5xx) the transport returns
// at once, because its caller retries them on a schedule of its own. A 429 and a broken
// connection are still retried here.
type serverErrorsToCallerKey struct{}

// serverErrorsToCaller returns ctx with its requests' 5xx answers returned without a retry.
func serverErrorsToCaller(ctx context.Context) context.Context {
	return context.WithValue(ctx, serverErrorsToCallerKey{}, true)
}

// backoff is the wait before retry number attempt+1: exponential, capped, with jitter so that
// scans failing together do not come back together.
func (t *politeTransport) backoff(attempt int) time.Duration {
	d := t.c.maxBackoff
	if attempt < 30 {
		d = min(t.c.initialBackoff<<attempt, t.c.maxBackoff)
	}
	half := d / 2
	return half + rand.N(half+1)
}

// retriable reports whether a request deserves another try: a registry that is overloaded,
// briefly failing or rate limiting, or a connection that broke or timed out.
func retriable(resp *http.Response, err error) bool {
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return false
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return true
		}
		return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
			errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter parses a Retry-After header, either delay-seconds or an HTTP date.
func retryAfter(header string, now time.Time) (time.Duration, bool) {
	header = strings.TrimSpace(header)
	if header == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(header, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	when, err := http.ParseTime(header)
	if err != nil {
		return 0, false
	}
	return max(when.Sub(now), 0), true
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RetryAfterError is the failure of a request that a registry rate-limited with a Retry-After
// longer than the time left before the scan's deadline: waiting would be pointless, so the scan
// fails at once. Unwrap gives the registry's *transport.Error with its code and message.
type RetryAfterError struct {
	// Wait is the delay the registry asked for.
	Wait time.Duration
	// Left is the time that was left before the deadline.
	Left time.Duration
	// Err is the registry's answer.
	Err *transport.Error
}

// Error says what the registry asked for and why it was not honoured.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("registry rate limit: %s; it asks to retry after %s, beyond the %s left of the scan's timeout",
		registryMessage(e.Err), e.Wait, e.Left.Round(time.Millisecond))
}

// Unwrap returns the registry's answer.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// tooLongWait turns a 429 whose Retry-After is past the deadline into a RetryAfterError.
func tooLongWait(resp *http.Response, wait, left time.Duration) error {
	err := transport.CheckError(resp)
	_ = resp.Body.Close()
	terr, ok := errors.AsType[*transport.Error](err)
	if !ok {
		return err
	}
	return &RetryAfterError{Wait: wait, Left: max(left, 0), Err: terr}
}

// registryMessage is the status and the error codes and messages of a registry's answer,
// without the request line that transport.Error puts first.
func registryMessage(e *transport.Error) string {
	status := fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if len(e.Errors) == 0 {
		return status
	}
	diags := make([]string, len(e.Errors))
	for i, d := range e.Errors {
		diags[i] = d.String()
	}
	return status + " (" + strings.Join(diags, "; ") + ")"
}
