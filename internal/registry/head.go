package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Head returns the digest of the manifest that tag points to, with one HEAD request through the
// scan's transport: for digest reflection, and to confirm that a tag named by a push event
// exists. HEAD does not count against Docker Hub's pull limit, where GET would.
func (s *Scan) Head(ctx context.Context, tag string) (string, error) {
	digest, err := s.head(ctx, tag)
	if err != nil {
		return "", s.headFailed(ctx, tag, err)
	}
	return digest, nil
}

// head is Head without the classification of its failure.
func (s *Scan) head(ctx context.Context, tag string) (string, error) {
	ctx, cancel := context.WithDeadline(ctx, s.deadline)
	defer cancel()
	ref, err := name.NewTag(s.repo.Name()+":"+tag, name.StrictValidation)
	if err != nil {
		return "", err
	}
	// A *transport.Wrapper makes go-containerregistry use the scan's transport as it is: no
	// second ping, no retry layer of its own.
	desc, err := remote.Head(s.repo.Tag(ref.TagStr()), remote.WithTransport(s.rt), remote.WithContext(ctx))
	if err != nil {
		if NotFound(err) {
			return "", fmt.Errorf("tag %q not found: %w", tag, err)
		}
		return "", err
	}
	return desc.Digest.String(), nil
}

// headFailed is the error of a Head of tag that failed with err.
func (s *Scan) headFailed(ctx context.Context, tag string, err error) error {
	ctx, cancel := context.WithDeadline(ctx, s.deadline)
	defer cancel()
	return s.fail(ctx, fmt.Sprintf("resolving the digest of %s:%s", s.repo.Name(), tag), err)
}

// confirmDelays are the waits between the HEADs of Confirm after a 404: 1.575 s in all, enough
// for a registry under load to write the tag it has announced. They start short and grow by
// half to two thirds each time, so that a tag written a few milliseconds after its notification,
// as docker-registry writes a third to a half of the pushes that BenchmarkPushToLatest sends it,
// is confirmed a few milliseconds later, and one written later is confirmed within about two
// thirds as long again; a tag that never appears costs eleven HEADs.
var confirmDelays = [...]time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	30 * time.Millisecond, 50 * time.Millisecond, 80 * time.Millisecond, 130 * time.Millisecond,
	200 * time.Millisecond, 300 * time.Millisecond, 750 * time.Millisecond}

// Confirm checks that tag, which a push event has just announced, exists: a HEAD, and while the
// registry answers 404, a few more at short intervals, because some registries (CNCF
// distribution 2.8 among them) send their notification before the tag can be read. The first
// server error of a confirmation, on whichever HEAD, is asked again on the same short schedule:
// distribution 2.8's filesystem storage rewrites a tag's link in place, and a HEAD that reads it
// half-written, at the moment the tag appears, fails with a 500; a server error after that gets
// the transport's retries and their backoff. It returns the digest the tag points at, or the
// last HEAD's error.
func (s *Scan) Confirm(ctx context.Context, tag string) (string, error) {
	torn := false // a server error has been asked again already
	for i := 0; ; i++ {
		hctx := ctx
		if !torn {
			hctx = serverErrorsToCaller(ctx)
		}
		digest, err := s.head(hctx, tag)
		if err == nil {
			return digest, nil
		}
		again := NotFound(err)
		if !torn && serverError(err) {
			torn, again = true, true
		}
		if i == len(confirmDelays) || !again {
			return "", s.headFailed(ctx, tag, err)
		}
		t := time.NewTimer(confirmDelays[i])
		select {
		case <-ctx.Done():
			t.Stop()
			return "", s.headFailed(ctx, tag, err)
		case <-t.C:
		}
	}
}

// NotFound tells a registry's 404 (an unknown repository, tag or manifest) from other failures.
func NotFound(err error) bool {
	terr, ok := errors.AsType[*transport.Error](err)
	return ok && terr.StatusCode == http.StatusNotFound
}

// serverError tells a registry's 5xx from other failures.
func serverError(err error) bool {
	terr, ok := errors.AsType[*transport.Error](err)
	return ok && terr.StatusCode >= http.StatusInternalServerError
}
