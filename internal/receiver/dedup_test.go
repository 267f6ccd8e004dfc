package receiver

import (
	"strings"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/webhook"
)

func TestDedupForgetsByAge(t *testing.T) {
	d := newDedup(time.Minute, 1000)
	now := time.Unix(0, 0)
	for i := range 100 {
		if !d.claim(bodyKey("p/ns", []byte{byte(i)}), now) {
			t.Fatalf("claim %d refused", i)
		}
	}
	if d.claim(bodyKey("p/ns", []byte{7}), now.Add(time.Second)) {
		t.Error("a repeat within the window was claimed")
	}
	// A claim after the window drops every expired key, not only the one claimed.
	d.claim(bodyKey("p/ns", []byte("late")), now.Add(2*time.Minute))
	if n := d.held(); n != 1 {
		t.Errorf("%d keys remembered after the window, want 1", n)
	}
}

func TestDeliveryKeysHaveABoundedSize(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	if k := bodyKey(strings.Repeat("s", 127), []byte(huge)); len(k) > 200 {
		t.Errorf("body key of %d bytes", len(k))
	}
	evs := []webhook.Event{{DeliveryID: huge}, {DeliveryID: "b"}, {DeliveryID: huge}}
	if k := eventKey(huge, huge, huge); len(k) > 64 {
		t.Errorf("event key of %d bytes", len(k))
	}
	if eventKey("a", "b", "c") == eventKey("a", "bc", "") {
		t.Error("the parts of an event key run into each other")
	}
	if id := deliveryID(evs); len(id) > maxShownIDLength+16 || !strings.HasSuffix(id, "(+1)") {
		t.Errorf("shown id %q (%d bytes)", id[:min(len(id), 40)], len(id))
	}
}

func TestManyPushedTagsAskForAListing(t *testing.T) {
	var evs []webhook.Event
	for i := range reconcile.MaxHintTags {
		evs = append(evs, webhook.Event{Tag: "t" + string(rune('a'+i))})
	}
	if tgt := newTarget(repoEntry{}, evs); tgt.hint() == nil || len(tgt.hint().Tags) != reconcile.MaxHintTags {
		t.Errorf("%d tags: hint %+v", len(evs), tgt.hint())
	}
	evs = append(evs, webhook.Event{Tag: "one-more"})
	if tgt := newTarget(repoEntry{}, evs); tgt.hint() != nil {
		t.Errorf("%d tags: hint %+v, want a full listing", len(evs), tgt.hint())
	}
}

// FuzzDecodeRepositoryEvent feeds arbitrary ApiServerSource data through the decoding of the
// scan function's CloudEvents path: it never panics, and what it accepts names a valid object.
func FuzzDecodeRepositoryEvent(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"image.toolkit.fluxcd.io/v1","kind":"ImageRepository","metadata":{"namespace":"a","name":"b"},"spec":{"image":"x"}}`))
	f.Add([]byte(`{"apiVersion":"image.toolkit.fluxcd.io/v1","kind":"ImagePolicy"}`))
	f.Add([]byte(`{"kind":"ImageRepository","apiVersion":"image.toolkit.fluxcd.io/v1","metadata":{"namespace":"A"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		repo, ignored, err := decodeRepositoryEvent(data)
		switch {
		case err != nil:
			if len(err.Error()) > 1024 {
				t.Errorf("a %d-byte error", len(err.Error()))
			}
		case ignored != "":
			if len(ignored) > 1024 {
				t.Errorf("a %d-byte reason", len(ignored))
			}
		case repo == nil || repo.Namespace == "" || repo.Name == "":
			t.Errorf("accepted %+v", repo)
		}
	})
}
