package testenv

import (
	"errors"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheCheckPasses(t *testing.T) {
	calls := 0
	Eventually(t, time.Second, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("%d calls, want 3", calls)
	}
}
