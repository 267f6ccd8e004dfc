package receiver

import (
	"net/http"
	"testing"

	"github.com/imagereflector/reflector/internal/metrics"
)

func TestOutcomeLabels(t *testing.T) {
	for _, c := range []struct {
		res  result
		want string
	}{
		{result{status: http.StatusAccepted}, metrics.WebhookAccepted},
		{result{status: http.StatusUnauthorized}, metrics.WebhookUnauthenticated},
		{result{status: http.StatusTooManyRequests}, metrics.WebhookRateLimited},
		{result{status: http.StatusInternalServerError}, metrics.WebhookFailed},
		{result{status: http.StatusBadRequest}, metrics.WebhookRejected},
		{result{status: http.StatusNotFound}, metrics.WebhookRejected},
		{result{status: http.StatusRequestEntityTooLarge}, metrics.WebhookRejected},
		{result{status: http.StatusOK, skipped: metrics.WebhookDeduplicated}, metrics.WebhookDeduplicated},
		{result{status: http.StatusOK, skipped: metrics.WebhookNoMatch}, metrics.WebhookNoMatch},
		{result{status: http.StatusOK}, metrics.WebhookIgnored},
	} {
		if got := c.res.outcome(); got != c.want {
			t.Errorf("status %d skipped %q: %s, want %s", c.res.status, c.res.skipped, got, c.want)
		}
	}
	if got := providerLabel("../../etc"); got != metrics.UnknownProvider {
		t.Errorf("an unknown provider is labelled %q", got)
	}
	if got := providerLabel("harbor"); got != "harbor" {
		t.Errorf("harbor is labelled %q", got)
	}
}
