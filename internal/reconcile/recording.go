package reconcile

import (
	"context"
	"sync"
	"time"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// Recording is the reconcile-request patch of a push whose scan runs beside it: the scan
// confirms and stores the pushed tags and announces them while the patch is on its way, and
// records its outcome in the status only once the patch has returned, from the object as the
// patch returned it. The tag store is a truthful cache, so tags confirmed before the request is
// durable are never wrong; a scan whose request could not be recorded writes no status, and a
// request whose scan is lost is repaired by the cron reconciler.
type Recording struct {
	// sent is when the patch was sent, taken before it went out.
	sent time.Time
	done chan struct{}
	obj  *v1.ImageRepository
	err  error

	mu sync.Mutex
	// then runs once the patch has succeeded, before Finish returns.
	then []func()
	over bool
}

// NewRecording returns the Recording of a patch sent at sent.
func NewRecording(sent time.Time) *Recording {
	return &Recording{sent: sent, done: make(chan struct{})}
}

// Finish reports the patch's result: the object as it returned it, or its error. Call it
// exactly once.
func (r *Recording) Finish(obj *v1.ImageRepository, err error) {
	r.mu.Lock()
	r.obj, r.err, r.over = obj, err, true
	then := r.then
	r.then = nil
	r.mu.Unlock()
	if err == nil {
		for _, fn := range then {
			fn()
		}
	}
	close(r.done)
}

// whenRecorded arranges for fn to run in Finish once the patch has succeeded. When Finish has
// run already, it runs nothing and reports done, and ok when the patch succeeded.
func (r *Recording) whenRecorded(fn func()) (done, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over {
		return true, r.err == nil
	}
	r.then = append(r.then, fn)
	return false, false
}

// finished tells whether Finish has been called.
func (r *Recording) finished() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.over
}

// wait returns the patch's result, or ctx's error when it ends first. A patch that has returned
// is its result even when ctx has ended too: a scan whose registry work ran into its deadline
// still records its outcome against the object its patch returned.
func (r *Recording) wait(ctx context.Context) (*v1.ImageRepository, error) {
	select {
	case <-r.done:
		return r.obj, r.err
	default:
	}
	select {
	case <-r.done:
		return r.obj, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
