package reconcile

import (
	"context"
	"time"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// ScanRecorded is Scan of repo (ScanRequest.Object) as the caller's own reconcile-request patch,
// sent at sent (taken before the request went out), returned it: a request recorded in the
// object, which later requests may join (Join). Only tests make such requests; the receiver's
// scans run beside their patches (ScanRequest.Beside).
func (s *Scanner) ScanRecorded(ctx context.Context, repo *v1.ImageRepository, hint *Hint, sent time.Time) (ScanOutcome, error) {
	return s.run(ctx, scanRequest{namespace: repo.Namespace, name: repo.Name, read: repo, hint: hint, sent: sent})
}
