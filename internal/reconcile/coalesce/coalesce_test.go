package coalesce

import (
	"context"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// list is a request type whose merge keeps every request in order, so that a test sees what a
// follow-up collected; mark is state a caller keeps with With, which merging must keep.
type list struct {
	items []string
	mark  string
}

func appendList(collected list, some bool, req list) list {
	if !some {
		collected.items = nil
	}
	collected.items = append(slices.Clone(collected.items), req.items...)
	return collected
}

func newQueue() (*Queue[string, list], *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return New[string](clk, appendList), clk
}

func req(items ...string) list { return list{items: items} }

// TestQueueRunsOneJobPerKeyAndOneFollowUp drives a queue through the calls a runner makes and
// checks what each answers: one job per key at a time, requests meanwhile merged into one
// follow-up, other keys independent.
func TestQueueRunsOneJobPerKeyAndOneFollowUp(t *testing.T) {
	type call struct {
		op   string // request, join, done, drop, take
		key  string
		item string
		want any // bool, or []string for take
	}
	tests := []struct {
		name  string
		calls []call
	}{
		{"an idle key starts a job that ends alone", []call{
			{"request", "a", "1", true},
			{"done", "a", "", true},
			{"request", "a", "2", true},
		}},
		{"requests during a job make one follow-up", []call{
			{"request", "a", "1", true},
			{"request", "a", "2", false},
			{"request", "a", "3", false},
			{"done", "a", "", false},
			{"take", "a", "", []string{"2", "3"}},
			{"request", "a", "4", false},
			{"done", "a", "", false},
			{"take", "a", "", []string{"4"}},
			{"done", "a", "", true},
		}},
		{"keys are independent", []call{
			{"request", "a", "1", true},
			{"request", "b", "1", true},
			{"request", "a", "2", false},
			{"done", "b", "", true},
			{"done", "a", "", false},
		}},
		{"a caller that gave up drops the follow-up", []call{
			{"request", "a", "1", true},
			{"request", "a", "2", false},
			{"drop", "a", "", true},
			{"request", "a", "3", true},
		}},
		{"a join needs collected requests", []call{
			{"join", "a", "1", false},
			{"request", "a", "1", true},
			{"join", "a", "2", false},
			{"request", "a", "3", false},
			{"join", "a", "4", true},
			{"join", "a", "refused", false},
			{"done", "a", "", false},
			{"take", "a", "", []string{"3", "4"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := newQueue()
			for i, c := range tt.calls {
				var got any
				switch c.op {
				case "request":
					got = q.Request(c.key, req(c.item))
				case "join":
					got = q.Join(c.key, req(c.item), func(l list) bool { return c.item != "refused" })
				case "done":
					got = q.Done(c.key, false)
				case "drop":
					got = q.Done(c.key, true)
				case "take":
					got = q.Take(c.key).items
				}
				if ok, isBool := c.want.(bool); isBool && got != ok {
					t.Fatalf("call %d, %s %s %q: %v, want %v", i, c.op, c.key, c.item, got, ok)
				}
				if want, isList := c.want.([]string); isList && !slices.Equal(got.([]string), want) {
					t.Fatalf("call %d, %s %s: %q, want %q", i, c.op, c.key, got, want)
				}
			}
		})
	}
}

// TestWithKeepsTheRunnersState checks that state a runner keeps with With reaches merge and
// lasts until the follow-up is taken, and that With tells an idle key.
func TestWithKeepsTheRunnersState(t *testing.T) {
	q, _ := newQueue()
	if q.With("a", func(*list, bool) { t.Error("With ran on an idle key") }) {
		t.Fatal("With reported a job of an idle key")
	}
	q.Request("a", req("1"))
	q.With("a", func(l *list, collected bool) {
		if collected {
			t.Error("nothing was collected yet")
		}
		l.mark = "read"
	})
	q.Request("a", req("2"))
	q.With("a", func(l *list, collected bool) {
		if !collected || l.mark != "read" || !slices.Equal(l.items, []string{"2"}) {
			t.Errorf("follow-up %+v (collected %v), want items [2] and the mark kept", *l, collected)
		}
	})
	if q.Done("a", false) {
		t.Fatal("the follow-up was dropped")
	}
	if next := q.Take("a"); next.mark != "read" {
		t.Errorf("taken %+v, want the mark", next)
	}
	q.With("a", func(l *list, collected bool) {
		if collected || l.mark != "" || l.items != nil {
			t.Errorf("the next follow-up starts from %+v (collected %v), want nothing", *l, collected)
		}
	})
}

// TestSettleWaitsForRequestsToStop runs Settle on a fake clock: it returns once no request has
// arrived for the quiet period, or max after the first, or at half the time its context had
// left, whichever comes first.
func TestSettleWaitsForRequestsToStop(t *testing.T) {
	const step = 500 * time.Millisecond
	tests := []struct {
		name     string
		quiet    time.Duration
		max      time.Duration
		deadline time.Duration // of the context, in the clock's time; zero: none
		arrivals []time.Duration
		want     time.Duration // when Settle returns, after it was called
	}{
		{"quiet after one request", 2 * time.Second, time.Minute, 0, nil, 2 * time.Second},
		{"each request starts the quiet period again", 2 * time.Second, time.Minute, 0,
			[]time.Duration{time.Second, 2500 * time.Millisecond}, 4500 * time.Millisecond},
		{"a stream of requests ends at max", 2 * time.Second, 5 * time.Second, 0,
			[]time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second, 6 * time.Second}, 5 * time.Second},
		{"half the context's time bounds it", 2 * time.Second, time.Minute, 6 * time.Second,
			[]time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, clk := newQueue()
			// The clock reads real time, so that a context deadline means the same to both.
			clk.SetTime(time.Now())
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, clk.Now().Add(tt.deadline))
				defer cancel()
			}
			q.Request("a", req("job"))
			q.Request("a", req("0"))
			done := make(chan struct{})
			go func() {
				defer close(done)
				q.Settle(ctx, "a", func(list) time.Duration { return tt.quiet }, tt.max)
			}()
			// settled waits until Settle waits on a timer again or has returned.
			settled := func() bool {
				for {
					select {
					case <-done:
						return true
					default:
					}
					if clk.HasWaiters() {
						return false
					}
					time.Sleep(time.Millisecond)
				}
			}
			arrivals := tt.arrivals
			for elapsed := time.Duration(0); ; elapsed += step {
				for len(arrivals) > 0 && arrivals[0] <= elapsed {
					q.Request("a", req(arrivals[0].String()))
					arrivals = arrivals[1:]
				}
				if settled() {
					if elapsed != tt.want {
						t.Fatalf("Settle returned after %v, want %v", elapsed, tt.want)
					}
					return
				}
				if elapsed > time.Minute {
					t.Fatal("Settle did not return")
				}
				clk.Step(step)
			}
		})
	}
}

// TestSettleReturnsAtOnceWithoutRequests checks that a job without a follow-up does not wait.
func TestSettleReturnsAtOnceWithoutRequests(t *testing.T) {
	q, _ := newQueue()
	q.Request("a", req("job"))
	q.Settle(context.Background(), "a", func(list) time.Duration { return time.Hour }, time.Hour)
	q.Settle(context.Background(), "idle", func(list) time.Duration { return time.Hour }, time.Hour)
}
