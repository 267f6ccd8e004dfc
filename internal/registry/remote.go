package registry

import (
	"context"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Remote returns the options under which go-containerregistry's remote package reaches the
// scan's repository as the scan does: its transport (credentials, TLS, proxy, retries and rate
// limit) and a context that ends at the scan's deadline. Call cancel when done.
func (s *Scan) Remote(ctx context.Context) (opts []remote.Option, cancel context.CancelFunc) {
	ctx, cancel = context.WithDeadline(ctx, s.deadline)
	return []remote.Option{remote.WithTransport(s.rt), remote.WithContext(ctx)}, cancel
}
