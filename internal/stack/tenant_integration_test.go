package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
)

// clusterSecret is what the server that stands for the cluster's private network answers.
const clusterSecret = "db_password=cluster-internal"

// tenantRepository applies an ImageRepository of image in namespace default, with edits to its
// spec as YAML lines, and waits for its first scan's status.
func tenantRepository(t *testing.T, s *stack.Stack, name, image string, specLines ...string) *v1.ImageRepository {
	t.Helper()
	ctx := context.Background()
	manifest := fmt.Sprintf("apiVersion: image.toolkit.fluxcd.io/v1\nkind: ImageRepository\nmetadata:\n  name: %s\nspec:\n  image: %s\n  interval: 1h\n  timeout: 30s\n", name, image)
	for _, l := range specLines {
		manifest += "  " + l + "\n"
	}
	if _, err := s.Env.Apply(ctx, "default", []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	var repo *v1.ImageRepository
	testenv.Eventually(t, 90*time.Second, func() error {
		r, err := s.Kube.Repositories.Get(ctx, "default", name)
		if err != nil {
			return err
		}
		if ready(r).Reason == "" || ready(r).Reason == v1.ProgressingReason {
			return fmt.Errorf("%s not reconciled yet (%+v); logs in %s", name, ready(r), s.Log(stack.Scan))
		}
		repo = r
		return nil
	})
	return repo
}

// wantNowhere checks that none of needles appears in repository name's status, its Events or the
// functions' logs.
func wantNowhere(t *testing.T, s *stack.Stack, repo *v1.ImageRepository, needles ...string) {
	t.Helper()
	evs, err := s.Kube.Events.List(context.Background(), "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mine []corev1.Event
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == repo.Name {
			mine = append(mine, e)
		}
	}
	status, _ := json.Marshal(repo.Status)
	events, _ := json.Marshal(mine)
	places := map[string]string{"status": string(status), "Events": string(events)}
	for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
		b, _ := os.ReadFile(s.Log(c))
		places[c+" log"] = string(b)
	}
	for where, text := range places {
		for _, n := range needles {
			if strings.Contains(text, n) {
				t.Errorf("the %s holds %q", where, n)
			}
		}
	}
}

// TestTenantLockdownIntegration points ImageRepositories of the real running functions at what
// a hostile tenant would: a registry that redirects to the cluster's private network, that
// network's address itself, a thousand redirect host names, its own proxy for the functions'
// cloud identity. The stack allows 127.0.0.1 alone, as `make run` does, so 127.0.0.2 stands for
// the cluster's private network.
func TestTenantLockdownIntegration(t *testing.T) {
	// A dead proxy for everything the functions would send beyond loopback: an object named
	// after a real cloud registry must never reach it, whatever happens.
	dead := []string{"HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "NO_PROXY=localhost", "https_proxy=", "http_proxy=", "no_proxy="}
	s := start(t, stack.Options{CronEvery: time.Hour, Env: map[string][]string{
		stack.Scan:   append([]string{"REFLECTOR_REGISTRY_RATE=0"}, dead...),
		stack.Policy: dead,
	}})
	internalHost, internalAccepted := testenv.ServeCounted(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, clusterSecret)
	}))
	wantRefused := func(t *testing.T, repo *v1.ImageRepository) {
		t.Helper()
		cond := ready(repo)
		if cond.Status != metav1.ConditionFalse || cond.Reason != v1.AddressNotAllowedReason {
			t.Errorf("Ready %s %s %q, want False %s", cond.Status, cond.Reason, cond.Message, v1.AddressNotAllowedReason)
		}
		if n := internalAccepted.Load(); n != 0 {
			t.Errorf("%d connections reached 127.0.0.2", n)
		}
	}

	t.Run("a redirect to the private network", func(t *testing.T) {
		tenant, _ := testenv.ServeCounted(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				return
			}
			http.Redirect(w, r, "http://"+internalHost+"/internal/secret", http.StatusFound)
		}))
		repo := tenantRepository(t, s, "redirected", tenant+"/app")
		wantRefused(t, repo)
		wantNowhere(t, s, repo, internalHost, "/internal/secret", clusterSecret)
	})

	t.Run("spec.image at the private network", func(t *testing.T) {
		repo := tenantRepository(t, s, "internal", internalHost+"/app", "insecure: true")
		wantRefused(t, repo)
		wantNowhere(t, s, repo, clusterSecret)
	})

	t.Run("a thousand redirect host names", func(t *testing.T) {
		const hops = 1000
		// Each page of the listing is redirected to another name of 127.0.0.1: "localhost" in
		// 512 spellings of its letters' case, on two ports, which the hosts file resolves
		// without any DNS server.
		var ports [2]string
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v2/":
			case "/v2/app/tags/list":
				i := 0
				fmt.Sscan(r.URL.Query().Get("page"), &i)
				http.Redirect(w, r, fmt.Sprintf("http://%s:%s/page?i=%d", spelling(i%512), ports[i/512], i), http.StatusFound)
			case "/page":
				i := 0
				fmt.Sscan(r.URL.Query().Get("i"), &i)
				if i+1 < hops {
					w.Header().Set("Link", fmt.Sprintf(`</v2/app/tags/list?n=1000&page=%d>; rel="next"`, i+1))
				}
				fmt.Fprintf(w, `{"name":"app","tags":["t%d"]}`, i)
			default:
				http.NotFound(w, r)
			}
		})
		first, _ := testenv.ServeCounted(t, "127.0.0.1:0", handler)
		second, _ := testenv.ServeCounted(t, "127.0.0.1:0", handler)
		_, ports[0], _ = net.SplitHostPort(first)
		_, ports[1], _ = net.SplitHostPort(second)
		before := testenv.Scrape(t, s.Metrics[stack.Scan])
		repo := tenantRepository(t, s, "wandering", first+"/app")
		if res := repo.Status.LastScanResult; res == nil || res.TagCount != hops {
			t.Fatalf("lastScanResult %+v, Ready %+v", res, ready(repo))
		}
		after := testenv.Scrape(t, s.Metrics[stack.Scan])
		hosts := map[string]bool{}
		for _, m := range after["reflector_registry_requests_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "host" {
					hosts[l.GetValue()] = true
				}
			}
		}
		if len(hosts) > 5 {
			t.Errorf("%d host series after the scan: %v", len(hosts), hosts)
		}
		for h := range hosts {
			if strings.Contains(strings.ToLower(h), "localhost") {
				t.Errorf("a series for the redirect host %s", h)
			}
		}
		limiters := func(m testenv.Metrics) float64 {
			for _, s := range m["reflector_registry_rate_limiters"].GetMetric() {
				return s.GetGauge().GetValue()
			}
			return 0
		}
		if grew := limiters(after) - limiters(before); grew > 1 {
			t.Errorf("the scan added %v rate limiters, want at most 1", grew)
		}
	})

	t.Run("the functions' cloud identity through the tenant's proxy", func(t *testing.T) {
		var proxied atomic.Int32
		proxy, _ := testenv.ServeCounted(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proxied.Add(1)
			w.Header().Set("Proxy-Authenticate", `Basic realm="tenant"`)
			w.WriteHeader(http.StatusProxyAuthRequired)
		}))
		if _, err := s.Kube.Secrets.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-proxy", Namespace: "default"},
			Data:       map[string][]byte{"address": []byte("http://" + proxy)},
		}); err != nil {
			t.Fatal(err)
		}
		for name, lines := range map[string][]string{
			"ecr-proxied": {"provider: aws", "insecure: true", "proxySecretRef:", "  name: tenant-proxy"},
			"ecr-plain":   {"provider: aws", "insecure: true"},
			"gar-proxied": {"provider: gcp", "proxySecretRef:", "  name: tenant-proxy"},
		} {
			host := testenv.ECRHost
			if strings.HasPrefix(name, "gar") {
				host = testenv.GARHost
			}
			repo := tenantRepository(t, s, name, host+"/team/app", lines...)
			cond := ready(repo)
			if cond.Status != metav1.ConditionFalse || cond.Reason != v1.TransportNotTrustedReason {
				t.Errorf("%s: Ready %s %s %q, want False %s", name, cond.Status, cond.Reason, cond.Message, v1.TransportNotTrustedReason)
			}
			stalled := false
			for _, c := range repo.Status.Conditions {
				stalled = stalled || (c.Type == v1.StalledCondition && c.Status == metav1.ConditionTrue)
			}
			if !stalled {
				t.Errorf("%s is not Stalled: %+v", name, repo.Status.Conditions)
			}
		}
		if n := proxied.Load(); n != 0 {
			t.Errorf("%d requests reached the tenant's proxy", n)
		}
	})
}

// spelling returns "localhost" with the case of its letters set by the bits of i.
func spelling(i int) string {
	b := []byte("localhost")
	for k := range b {
		if i&(1<<k) != 0 {
			b[k] -= 'a' - 'A'
		}
	}
	return string(b)
}
