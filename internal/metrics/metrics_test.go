package metrics

import (
	"errors"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRecordReconcileFollowsFluxOnSuspension(t *testing.T) {
	count := func(name string) int {
		rec := httptest.NewRecorder()
		Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		series := regexp.MustCompile(`gotk_reconcile_duration_seconds_count\{kind="[^"]+",name="` + name + `",`)
		return len(series.FindAllString(rec.Body.String(), -1))
	}
	RecordReconcile(Reconcile{Kind: KindImagePolicy, Namespace: "ns", Name: "suspended", Suspended: true, Took: time.Second})
	if n := count("suspended"); n != 0 {
		t.Errorf("a suspended object was recorded (%d series)", n)
	}
	RecordReconcile(Reconcile{Kind: KindImagePolicy, Namespace: "ns", Name: "deleting", Suspended: true, Deleting: true, Took: time.Second})
	if n := count("deleting"); n != 1 {
		t.Errorf("a suspended object being deleted was not recorded (%d series)", n)
	}
	RecordReconcile(Reconcile{Kind: KindImageRepository, Namespace: "ns", Name: "live", Took: 30 * time.Millisecond})
	if n := count("live"); n != 1 {
		t.Errorf("an object was not recorded (%d series)", n)
	}
}

func TestHandlerServesEveryFamily(t *testing.T) {
	RecordWebhook("github", WebhookAccepted)
	RecordRegistryRequest("ghcr.io", 0)
	RecordRegistryRequest("ghcr.io", 429)
	RecordRetryAfter("ghcr.io", 2*time.Second)
	RecordStoreWait(true, time.Millisecond)
	RecordStoreDamage(StoreDamageRebuilt)
	RecordStoreFull()
	SetRepositoryTags("ns", "app", 3)
	RecordEventSent("t", false)
	RecordFluxEvent(FluxEventDropped)
	RecordCronPass(map[string]int{"repositories": 2}, time.Second, nil)
	RecordCronPass(nil, 0, errors.New("apiserver down"))
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`reflector_webhook_requests_total{provider="github",result="accepted"} 1`,
		`reflector_registry_requests_total{code="error",host="ghcr.io"} 1`,
		`reflector_registry_requests_total{code="429",host="ghcr.io"} 1`,
		`reflector_registry_retry_after_wait_seconds_total{host="ghcr.io"} 2`,
		`reflector_store_lock_wait_seconds_count{mode="write"} 1`,
		`reflector_store_damage_total{action="rebuilt"} 1`,
		`reflector_store_full_total 1`,
		`reflector_repository_tags{name="app",namespace="ns"} 3`,
		`reflector_events_sent_total{result="not_acknowledged",type="t"} 1`,
		`reflector_flux_events_total{result="dropped"} 1`,
		`reflector_cron_passes_total{result="failed"} 1`,
		`reflector_cron_last_pass_objects{count="repositories"} 2`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	ForgetRepository("ns", "app")
	if testutil.CollectAndCount(repositoryTags) != 0 {
		t.Error("ForgetRepository left the series")
	}
}
