package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Head returns the digest of the manifest that tag points to, with one HEAD request through the
// scan's transport: for digest reflection, and to confirm that a tag named by a push event
// exists. HEAD does not count against Docker Hub's pull limit, where GET would.
func (s *Scan) Head(ctx context.Context, tag string) (string, error) {
	ctx, cancel := context.WithDeadline(ctx, s.deadline)
	defer cancel()
	what := fmt.Sprintf("resolving the digest of %s:%s", s.repo.Name(), tag)
	ref, err := name.NewTag(s.repo.Name()+":"+tag, name.StrictValidation)
	if err != nil {
		return "", s.fail(ctx, what, err)
	}
	// A *transport.Wrapper makes go-containerregistry use the scan's transport as it is: no
	// second ping, no retry layer of its own.
	desc, err := remote.Head(s.repo.Tag(ref.TagStr()), remote.WithTransport(s.rt), remote.WithContext(ctx))
	if err != nil {
		if terr, ok := errors.AsType[*transport.Error](err); ok && terr.StatusCode == http.StatusNotFound {
			return "", s.fail(ctx, what, fmt.Errorf("tag %q not found: %w", tag, err))
		}
		return "", s.fail(ctx, what, err)
	}
	return desc.Digest.String(), nil
}
