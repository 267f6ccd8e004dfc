// Package coalesce runs at most one job per key at a time and merges the requests that arrive
// while it runs into one follow-up job, as client-go's workqueue keeps a key that is added
// while it is processed dirty for one more round. Here the caller whose request started a
// key's job runs the follow-ups too, so that a request-scoped process (a function) needs no
// workers of its own: the scan function scans a repository once per burst of pushes this way.
package coalesce

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Queue coalesces the requests of each key K; R is what one request carries and what the
// requests collected for a follow-up add up to. Its zero value is not usable; call New.
type Queue[K comparable, R any] struct {
	clock clock.WithTicker
	merge func(collected R, some bool, req R) R

	mu   sync.Mutex
	jobs map[K]*job[R]
}

// job is the state of a key whose job is running: the requests collected for its follow-up.
type job[R any] struct {
	// collected tells whether any request arrived since the job started; next is their merge.
	collected bool
	next      R
	// first and last are when the first and the latest collected request arrived.
	first, last time.Time
}

// New returns a Queue that tells time by clk and merges a request req into the collected
// requests with merge; some tells whether collected holds any yet (else it is the state that
// With left for the running job, or R's zero value).
func New[K comparable, R any](clk clock.WithTicker, merge func(collected R, some bool, req R) R) *Queue[K, R] {
	return &Queue[K, R]{clock: clk, merge: merge, jobs: map[K]*job[R]{}}
}

// Request is a request for key. When no job of key runs, it starts one and reports true: the
// caller runs the job for req, then ends it with Done, and runs the follow-ups that Take hands
// it until Done reports that none was collected. Otherwise it merges req into the running job's
// follow-up and reports false.
func (q *Queue[K, R]) Request(key K, req R) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[key]
	if !ok {
		q.jobs[key] = &job[R]{}
		return true
	}
	q.collect(j, req)
	return false
}

// Join merges req into the follow-up of key only when requests are collected for it already
// and ok holds for their merge, and reports whether it did.
func (q *Queue[K, R]) Join(key K, req R, ok func(collected R) bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, running := q.jobs[key]
	if !running || !j.collected || !ok(j.next) {
		return false
	}
	q.collect(j, req)
	return true
}

// collect merges req into j's follow-up. q.mu is held.
func (q *Queue[K, R]) collect(j *job[R], req R) {
	now := q.clock.Now()
	if !j.collected {
		j.first = now
	}
	j.next = q.merge(j.next, j.collected, req)
	j.collected = true
	j.last = now
}

// With runs fn, under the queue's lock, on the follow-up state of key's running job (the merge
// of the collected requests, if any) and reports true; it reports false, without running fn,
// when no job of key runs. fn must not call the queue.
func (q *Queue[K, R]) With(key K, fn func(next *R, collected bool)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[key]
	if ok {
		fn(&j.next, j.collected)
	}
	return ok
}

// Settle waits until requests for key stop arriving: until none has arrived for quiet(next),
// next being their merge so far, or until max has passed since the first, and never beyond half
// the time ctx had left when Settle was called; or until ctx ends. It returns at once when no
// request is collected.
func (q *Queue[K, R]) Settle(ctx context.Context, key K, quiet func(next R) time.Duration, max time.Duration) {
	start := q.clock.Now()
	for {
		q.mu.Lock()
		j, ok := q.jobs[key]
		if !ok || !j.collected {
			q.mu.Unlock()
			return
		}
		now := q.clock.Now()
		d := min(j.last.Add(quiet(j.next)).Sub(now), j.first.Add(max).Sub(now))
		q.mu.Unlock()
		if deadline, ok := ctx.Deadline(); ok {
			d = min(d, start.Add(deadline.Sub(start)/2).Sub(now))
		}
		if d <= 0 {
			return
		}
		t := q.clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// Done ends the running job of key, and with it the series of jobs, unless requests were
// collected while it ran and drop is false; it reports whether it ended the series. A caller
// that gave up drops what was collected.
func (q *Queue[K, R]) Done(key K, drop bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.jobs[key]
	if !ok {
		return true
	}
	if drop || !j.collected {
		delete(q.jobs, key)
		return true
	}
	return false
}

// Take hands the caller the merge of the requests collected for key's follow-up, after Done
// reported that some were, and starts the follow-up: requests that arrive from now on are
// collected for the one after it.
func (q *Queue[K, R]) Take(key K) R {
	q.mu.Lock()
	defer q.mu.Unlock()
	j := q.jobs[key]
	next := j.next
	*j = job[R]{}
	return next
}
