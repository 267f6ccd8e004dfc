package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/events"
)

// countingDispatcher records the dispatches it is given and how many overlap. The first
// `hold` of them wait until that many are under way at once, so that a bound of at least
// hold is reached, not merely allowed. Those whose name is in fail fail.
type countingDispatcher struct {
	hold    int
	fail    map[string]bool
	onSend  func()
	mu      sync.Mutex
	sent    []string
	running int
	most    int
	full    chan struct{}
}

func (d *countingDispatcher) Send(_ context.Context, _, subject string, _ any) error {
	d.mu.Lock()
	d.sent = append(d.sent, subject)
	d.running++
	d.most = max(d.most, d.running)
	first := len(d.sent) <= d.hold
	if d.running == d.hold && first {
		close(d.full)
	}
	d.mu.Unlock()
	if first {
		select {
		case <-d.full:
		case <-time.After(10 * time.Second):
		}
	}
	if d.onSend != nil {
		d.onSend()
	}
	d.mu.Lock()
	d.running--
	d.mu.Unlock()
	if d.fail[subject] {
		return errors.New("refused")
	}
	return nil
}

func work(to Dispatcher, names ...string) []dispatch {
	var out []dispatch
	for _, n := range names {
		out = append(out, dispatch{to: to, ceType: events.TypeScanRequested, ref: events.ObjectRef{Namespace: "ns", Name: n}})
	}
	return out
}

func TestSendBoundedEveryItemTried(t *testing.T) {
	d := &countingDispatcher{hold: 3, full: make(chan struct{}), fail: map[string]bool{"ns/b": true, "ns/e": true}}
	p := &Pass{Concurrency: 3}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ok, failed := p.send(context.Background(), time.Now(), work(d, "a", "b", "c", "d", "e", "f", "g"), time.Now, log)
	if ok != 5 || failed != 2 {
		t.Errorf("send: %d ok, %d failed; want 5 and 2", ok, failed)
	}
	if len(d.sent) != 7 {
		t.Errorf("sent %v, want every item once", d.sent)
	}
	if d.most != 3 {
		t.Errorf("%d dispatches under way at once, want 3", d.most)
	}
}

func TestSendStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &countingDispatcher{full: make(chan struct{}), onSend: cancel}
	p := &Pass{Concurrency: 1}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ok, failed := p.send(ctx, time.Now(), work(d, "a", "b", "c"), time.Now, log)
	if ok != 1 || failed != 0 || len(d.sent) != 1 {
		t.Errorf("send after the pass was cancelled: %d ok, %d failed, sent %v; want only the first", ok, failed, d.sent)
	}
}
