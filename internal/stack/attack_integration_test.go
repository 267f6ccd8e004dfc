package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
)

// The OIDC set-up of the stack: the senders' ServiceAccounts live in brokerNamespace, and each
// function requires its own audience.
const (
	brokerNamespace = stack.OIDCNamespace
	scanAudience    = stack.ScanAudience
	policyAudience  = stack.PolicyAudience
)

// unauthenticatedBurst is the attack stack's budget of webhook deliveries that fail
// authentication per remote address; it refills at a rate that adds less than one over the
// test, so that the flood below is counted exactly.
const unauthenticatedBurst = 400

// attackStack is the whole system as `make run` starts it, sender proof included: the
// functions' cluster-local listeners accept only tokens of brokerNamespace's ServiceAccounts for
// their audience, and the processes that send events present such tokens.
type attackStack struct {
	*stack.Stack
	// token is valid for both audiences, as the broker's.
	token string
}

func startAttackStack(t *testing.T) *attackStack {
	t.Helper()
	dir := t.TempDir()
	s := start(t, stack.Options{
		Dir:       filepath.Join(dir, "stack"),
		CronEvery: time.Hour,
		Env: map[string][]string{
			// The receiver's rate limit would turn the memory attacks away early; they must
			// be bounded without it.
			stack.Scan: {"REFLECTOR_WEBHOOK_RATE=10000", "REFLECTOR_WEBHOOK_BURST=10000",
				"REFLECTOR_WEBHOOK_UNAUTHENTICATED_RATE=0.001", "REFLECTOR_WEBHOOK_UNAUTHENTICATED_BURST=" + strconv.Itoa(unauthenticatedBurst)},
		},
	})
	token, err := s.SenderToken(context.Background(), scanAudience, policyAudience)
	if err != nil {
		t.Fatal(err)
	}
	return &attackStack{Stack: s, token: token}
}

// serviceAccountToken returns a token of ServiceAccount namespace/name for audiences, issued
// by the apiserver's TokenRequest as Knative's token provider does.
func (a *attackStack) serviceAccountToken(t *testing.T, namespace, name string, audiences ...string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := a.Kube.Namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := a.Kube.ServiceAccounts.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := a.Kube.ServiceAccounts.CreateToken(ctx, namespace, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// send posts body to url with headers and returns the answer's status and body.
func send(t *testing.T, url string, body io.Reader, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// cloudEvent returns the headers of a binary-mode CloudEvent.
func cloudEvent(ceType, id string, extra map[string]string) map[string]string {
	h := map[string]string{
		"Ce-Specversion": "1.0", "Ce-Type": ceType, "Ce-Source": "/attacker", "Ce-Id": id,
		"Content-Type": "application/json",
	}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// snapshot is what an attack must not change.
type snapshot struct {
	annotation string
	scanStatus string
	latest     string
}

func (a *attackStack) snapshot(t *testing.T) snapshot {
	t.Helper()
	ctx := context.Background()
	repo, err := a.Kube.Repositories.Get(ctx, "default", "app")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := a.Kube.Policies.Get(ctx, "default", "stable")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(repo.Status.LastScanResult)
	latest, _ := json.Marshal(pol.Status.LatestRef)
	return snapshot{
		annotation: repo.Annotations[v1.ReconcileRequestAnnotation],
		scanStatus: string(st),
		latest:     string(latest),
	}
}

func (a *attackStack) unchanged(t *testing.T, before snapshot, attack string) {
	t.Helper()
	if after := a.snapshot(t); after != before {
		t.Errorf("%s changed state:\nbefore %+v\nafter  %+v", attack, before, after)
	}
}

// rss returns the scan function's resident set and its peak, in bytes.
func (a *attackStack) rss(t *testing.T) (now, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.PID(stack.Scan)))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			now = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return now, peak
}

// secretRequests returns how many requests for Secrets the apiserver has served, from its
// own apiserver_request_total.
func (a *attackStack) secretRequests(t *testing.T) int {
	t.Helper()
	b, err := clientset.For(a.Env).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="secrets"`) {
			continue
		}
		fields := strings.Fields(line)
		v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		n += int(v)
	}
	return n
}

// TestAttacksIntegration sends attacks to the real running functions, as an attacker on the
// internet (the public webhook listener) or inside the cluster (the cluster-local listeners)
// would, and checks each is refused, changes nothing, and costs bounded memory and apiserver
// requests.
func TestAttacksIntegration(t *testing.T) {
	ctx := context.Background()
	a := startAttackStack(t)
	image := a.Registry + "/attack/app"
	if _, err := a.Env.Apply(ctx, "default", []byte(fmt.Sprintf(observedManifests, image))); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Push(image + ":1.0.0"); err != nil {
		t.Fatal(err)
	}
	// The whole chain works with sender authentication on: the registry's notification, the
	// scan, the TagsChanged event with the broker's token, the evaluation.
	waitLatest(t, a.Stack, "stable", "1.0.0")
	baseline, _ := a.rss(t)
	before := a.snapshot(t)
	const scanRequest = `{"namespace":"default","name":"app"}`
	intruder := a.serviceAccountToken(t, "intruders", "mallory", scanAudience, policyAudience)
	wrongAudience := a.serviceAccountToken(t, brokerNamespace, "other", "some-other-service")
	policyOnly := a.serviceAccountToken(t, brokerNamespace, "other", policyAudience)
	// forged are the headers of senders that are not the Broker, by what they present.
	forged := map[string]map[string]string{"no token": {}}
	for name, auth := range map[string]string{
		"garbage":               "Bearer not.a.jwt",
		"another namespace":     "Bearer " + intruder,
		"another audience":      "Bearer " + wrongAudience,
		"the other function's":  "Bearer " + policyOnly,
		"the token in a header": a.token,
	} {
		forged[name] = map[string]string{"Authorization": auth}
	}

	t.Run("no CloudEvents on the public listener but at /broker", func(t *testing.T) {
		for _, path := range []string{"/", "/evaluate", "/x"} {
			code, _ := send(t, a.ScanURL+path, strings.NewReader(scanRequest),
				cloudEvent(events.TypeScanRequested, "public-1", map[string]string{"Authorization": "Bearer " + a.token}))
			if code != http.StatusNotFound {
				t.Errorf("POST %s on the public listener: %d, want 404", path, code)
			}
		}
		cdevent := `{"context":{"id":"x"},"subject":{"id":"pkg:oci/app?repository_url=` + image + `&tag=9.9.9"}}`
		if code, _ := send(t, a.ScanURL+"/", strings.NewReader(cdevent), cloudEvent("dev.cdevents.artifact.published.0.2.0", "cd-1", nil)); code != http.StatusNotFound {
			t.Errorf("a CDEvent on the public listener: %d, want 404", code)
		}
		a.unchanged(t, before, "CloudEvents on the public listener")
	})

	t.Run("the public listener's /broker proves the sender", func(t *testing.T) {
		// What the ApiServerSource sends: the whole ImageRepository, as it is now, with a
		// reconcile request that would start a scan if it got through.
		repo, err := a.Kube.Repositories.Get(ctx, "default", "app")
		if err != nil {
			t.Fatal(err)
		}
		repo.APIVersion, repo.Kind = v1.GroupVersion.String(), v1.ImageRepositoryKind
		repo.Annotations = map[string]string{v1.ReconcileRequestAnnotation: "attack"}
		update, err := json.Marshal(repo)
		if err != nil {
			t.Fatal(err)
		}
		url := a.ScanURL + stack.BrokerPath
		for name, h := range forged {
			if code, body := send(t, url, bytes.NewReader(update), cloudEvent(events.TypeAPIServerUpdate, "broker-"+name, h)); code != http.StatusUnauthorized {
				t.Errorf("an ImageRepository update, %s: %d %s, want 401", name, code, body)
			}
			// Refused before the body is read: 200 MiB is answered 401, not 413.
			if code, body := send(t, url, io.LimitReader(zeros{}, 200<<20), cloudEvent(events.TypeAPIServerUpdate, "broker-huge-"+name, h)); code != http.StatusUnauthorized {
				t.Errorf("a 200 MiB update, %s: %d %s, want 401", name, code, body)
			}
		}
		a.unchanged(t, before, "unauthenticated events on /broker")
		// With the broker's token, only the ApiServerSource's ImageRepository events: scan
		// requests and registry pushes stay on the cluster-local listener.
		auth := map[string]string{"Authorization": "Bearer " + a.token}
		if code, body := send(t, url, strings.NewReader(scanRequest), cloudEvent(events.TypeScanRequested, "broker-scan", auth)); code != http.StatusBadRequest {
			t.Errorf("a scan request on /broker with the broker's token: %d %s, want 400", code, body)
		}
		cdevent := `{"context":{"id":"x"},"subject":{"id":"pkg:oci/app?repository_url=` + image + `&tag=9.9.9"}}`
		if code, body := send(t, url, strings.NewReader(cdevent), cloudEvent("dev.cdevents.artifact.published.0.2.0", "broker-cd", auth)); code != http.StatusBadRequest {
			t.Errorf("a CDEvent on /broker with the broker's token: %d %s, want 400", code, body)
		}
		if code, _ := send(t, url, io.LimitReader(zeros{}, 200<<20), cloudEvent(events.TypeAPIServerUpdate, "broker-huge", auth)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("a 200 MiB update with the broker's token: %d, want 413", code)
		}
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			req, _ := http.NewRequest(method, url, nil)
			req.Header.Set("Authorization", "Bearer "+a.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s /broker with the broker's token: %d, want 405", method, resp.StatusCode)
			}
		}
		a.unchanged(t, before, "events on /broker the public listener does not serve")
	})

	t.Run("cluster-local listeners prove the sender", func(t *testing.T) {
		cdevent := `{"context":{"id":"x"},"subject":{"id":"pkg:oci/app?repository_url=` + image + `&tag=9.9.9"}}`
		for name, h := range forged {
			if code, body := send(t, a.ScanEventsURL+"/", strings.NewReader(scanRequest), cloudEvent(events.TypeScanRequested, "ce-"+name, h)); code != http.StatusUnauthorized {
				t.Errorf("scan request, %s: %d %s, want 401", name, code, body)
			}
			if code, body := send(t, a.ScanEventsURL+"/", strings.NewReader(cdevent), cloudEvent("dev.cdevents.artifact.published.0.2.0", "cd-"+name, h)); code != http.StatusUnauthorized {
				t.Errorf("registry push CloudEvent, %s: %d %s, want 401", name, code, body)
			}
			if name == "the other function's" {
				continue // a token for the policy function's audience is the right one there
			}
			for _, path := range []string{"/evaluate?namespace=default&name=stable", "/evaluate-repository?namespace=default&name=app"} {
				if code, body := send(t, a.PolicyURL+path, nil, h); code != http.StatusUnauthorized {
					t.Errorf("POST %s, %s: %d %s, want 401", path, name, code, body)
				}
			}
			if code, body := send(t, a.PolicyURL+"/", strings.NewReader(`{"namespace":"default","name":"stable"}`), cloudEvent(events.TypePolicyRequested, "pe-"+name, h)); code != http.StatusUnauthorized {
				t.Errorf("policy request, %s: %d %s, want 401", name, code, body)
			}
		}
		a.unchanged(t, before, "unauthenticated CloudEvents")
		// The broker's token passes, but /evaluate is not served without
		// REFLECTOR_DEBUG_ENDPOINTS, whoever asks.
		for _, path := range []string{"/evaluate?namespace=default&name=stable", "/evaluate-repository?namespace=default&name=app"} {
			if code, body := send(t, a.PolicyURL+path, nil, map[string]string{"Authorization": "Bearer " + a.token}); code != http.StatusNotFound {
				t.Errorf("POST %s with the broker's token: %d %s, want 404", path, code, body)
			}
		}
		if code, body := send(t, a.PolicyURL+"/", strings.NewReader(`{"namespace":"default","name":"stable"}`),
			cloudEvent(events.TypePolicyRequested, "pe-broker", map[string]string{"Authorization": "Bearer " + a.token})); code != http.StatusAccepted {
			t.Errorf("a policy request with the broker's token: %d %s, want 202", code, body)
		}
		a.unchanged(t, before, "requests with the broker's token")
	})

	t.Run("forged signatures spend no review budget", func(t *testing.T) {
		// More forged tokens than the review budget holds (20 a second, 40 at once), each
		// distinct, with the cluster's key ID and the broker's ServiceAccount as subject. Had
		// they been reviewed, a new genuine token right after them would be answered 429.
		forger, err := testenv.NewForger(a.token)
		if err != nil {
			t.Fatal(err)
		}
		forged := make([]string, 120)
		for i := range forged {
			forged[i], err = forger.Token(map[string]any{
				"aud": []string{policyAudience}, "sub": "system:serviceaccount:" + brokerNamespace + ":" + stack.BrokerAccount,
				"iss": a.Env.APIServerURL, "exp": time.Now().Add(time.Hour).Unix(), "jti": strconv.Itoa(i),
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for i, token := range forged {
			h := map[string]string{"Authorization": "Bearer " + token}
			if code, body := send(t, a.PolicyURL+"/", strings.NewReader(`{"namespace":"default","name":"stable"}`), cloudEvent(events.TypePolicyRequested, "pf-"+strconv.Itoa(i), h)); code != http.StatusUnauthorized {
				t.Fatalf("forged token %d: %d %s, want 401", i, code, body)
			}
		}
		fresh, err := a.SenderToken(ctx, scanAudience, policyAudience)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := send(t, a.PolicyURL+"/", strings.NewReader(`{"namespace":"default","name":"stable"}`),
			cloudEvent(events.TypePolicyRequested, "pe-fresh", map[string]string{"Authorization": "Bearer " + fresh})); code != http.StatusAccepted {
			t.Errorf("a new genuine token after the flood: %d %s, want 202", code, body)
		}
		a.unchanged(t, before, "forged tokens")
	})

	t.Run("unauthenticated webhooks are refused before their body is read", func(t *testing.T) {
		scrape := func() (verified, throttled float64) {
			m := testenv.Scrape(t, a.Metrics[stack.Scan])
			verified, _ = m.Value("reflector_webhook_requests_total", map[string]string{"provider": "distribution", "result": "unauthenticated"})
			throttled, _ = m.Value("reflector_webhook_requests_total", map[string]string{"provider": "distribution", "result": "throttled"})
			return verified, throttled
		}
		verifiedBefore, throttledBefore := scrape()
		// The flood comes from 127.0.0.2, an address of its own, so that its budget is not
		// the registry's (127.0.0.1).
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		flood := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
		body := fmt.Sprintf(`{"events":[{"id":"flood","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"attack/app","tag":"1.0.0"},"request":{"host":%q}}]}`, a.Registry)
		const n = unauthenticatedBurst + 100
		for i := range n {
			req, _ := http.NewRequest(http.MethodPost, a.ScanURL+"/hook/distribution/default", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer forged-"+strconv.Itoa(i))
			resp, err := flood.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		verified, throttled := scrape()
		// The budget refills by less than one delivery over the test.
		if v := verified - verifiedBefore; v < unauthenticatedBurst || v > unauthenticatedBurst+1 {
			t.Errorf("%v forged deliveries were read and verified, want the budget of %d", v, unauthenticatedBurst)
		}
		if th := throttled - throttledBefore; th < n-unauthenticatedBurst-1 {
			t.Errorf("%v forged deliveries were refused before the read, want %d", th, n-unauthenticatedBurst)
		}
		// Refused unread: headers that announce a 1 MiB body which never comes are answered.
		conn, err := dialer.Dial("tcp", strings.TrimPrefix(a.ScanURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard, not a measurement
		fmt.Fprintf(conn, "POST /hook/distribution/default HTTP/1.1\r\nHost: reflector\r\nAuthorization: Bearer forged\r\nContent-Length: %d\r\n\r\n", 1<<20)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("a delivery whose body never comes was not answered: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("headers only, over the budget: %d, want 429", resp.StatusCode)
		}
		// The registry's own deliveries, from 127.0.0.1, are still read and verified: this one
		// matches nothing, so it changes nothing either.
		unmatched := strings.Replace(body, "attack/app", "attack/none", 1)
		if code, answer := send(t, a.ScanURL+"/hook/distribution/default", strings.NewReader(unmatched), map[string]string{"Authorization": "Bearer " + a.Token}); code != http.StatusOK || !strings.Contains(answer, "no ImageRepository matches") {
			t.Errorf("the registry's token during the flood: %d %s, want 200 no match", code, answer)
		}
		a.unchanged(t, before, "the flood of forged deliveries")
	})

	// The adapter sends ImageRepository events to the public listener's /broker, as knative/'s
	// Triggers deliver them: `flux reconcile`'s annotation reaches a scan at once.
	t.Run("Knative's adapter proves itself with its ServiceAccount's token", func(t *testing.T) {
		token := time.Now().Format(time.RFC3339Nano)
		if _, err := a.Kube.Repositories.RequestReconcile(ctx, "default", "app", token); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			r, err := a.Kube.Repositories.Get(ctx, "default", "app")
			if err == nil && r.Status.LastHandledReconcileAt != token {
				err = fmt.Errorf("lastHandledReconcileAt %q, want %q; logs in %s", r.Status.LastHandledReconcileAt, token, a.Log(stack.SourceScan))
			}
			return err
		})
		before = a.snapshot(t)
	})

	t.Run("bodies are capped before decoding", func(t *testing.T) {
		huge := func() io.Reader { return io.LimitReader(zeros{}, 200<<20) }
		auth := map[string]string{"Authorization": "Bearer " + a.token}
		if code, _ := send(t, a.ScanEventsURL+"/", huge(), cloudEvent(events.TypeScanRequested, "huge", auth)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("200 MiB CloudEvent: %d, want 413", code)
		}
		if code, _ := send(t, a.PolicyURL+"/", huge(), cloudEvent(events.TypePolicyRequested, "huge", auth)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("200 MiB CloudEvent to the policy function: %d, want 413", code)
		}
		if code, _ := send(t, a.ScanURL+"/hook/distribution/default", huge(), map[string]string{"Authorization": "Bearer " + a.Token}); code != http.StatusRequestEntityTooLarge {
			t.Errorf("200 MiB webhook: %d, want 413", code)
		}
		// Undecodable data is not echoed: the answer repeats a bounded prefix at most.
		marker := strings.Repeat("UNDECODABLE", 20000)
		code, body := send(t, a.ScanEventsURL+"/", strings.NewReader(`{"namespace":"`+marker), cloudEvent(events.TypeScanRequested, "bad-data", auth))
		if code != http.StatusBadRequest || len(body) > 1024 {
			t.Errorf("undecodable data: %d with a %d-byte answer", code, len(body))
		}
		// Attributes over their bound are refused.
		code, _ = send(t, a.ScanEventsURL+"/", strings.NewReader(scanRequest), cloudEvent(events.TypeScanRequested, strings.Repeat("i", 100000), auth))
		if code != http.StatusBadRequest {
			t.Errorf("a 100 kB event id: %d, want 400", code)
		}
		a.unchanged(t, before, "oversized input")
	})

	// Event Grid's receiver: its handshake needs no token and changes nothing, other paths do
	// not answer one, an oversized origin is neither echoed nor logged, and its deliveries
	// without the token are refused. These few requests from 127.0.0.1 spend a few of that
	// address's budget, which the probes below also draw on.
	t.Run("Event Grid's handshake and forged deliveries change nothing", func(t *testing.T) {
		options := func(path string, header map[string]string) (int, http.Header) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodOptions, a.ScanURL+path, nil)
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header
		}
		origin := map[string]string{"WebHook-Request-Origin": "eventgrid.azure.net"}
		for _, path := range []string{"/hook/eventgrid/default", "/hook/eventgrid/no-such-namespace"} {
			if code, h := options(path, origin); code != http.StatusOK || h.Get("WebHook-Allowed-Origin") != "eventgrid.azure.net" || h.Get("WebHook-Allowed-Rate") == "" {
				t.Errorf("OPTIONS %s: %d %v, want 200 with consent", path, code, h)
			}
		}
		huge := strings.Repeat("h", 512<<10)
		if code, h := options("/hook/eventgrid/default", map[string]string{"WebHook-Request-Origin": huge}); code != http.StatusBadRequest || h.Get("WebHook-Allowed-Origin") != "" {
			t.Errorf("OPTIONS with a 512 KiB origin: %d, want 400 without consent", code)
		}
		// Past the server's header limit (1 MiB) the request is refused before the handler.
		if code, _ := options("/hook/eventgrid/default", map[string]string{"WebHook-Request-Origin": huge + huge + huge}); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("OPTIONS with a 1.5 MiB origin: %d, want 431", code)
		}
		for _, path := range []string{"/hook/distribution/default", "/hook/acr/default", "/broker"} {
			if code, h := options(path, origin); code == http.StatusOK || h.Get("WebHook-Allowed-Origin") != "" {
				t.Errorf("OPTIONS %s: %d %v, want no handshake", path, code, h)
			}
		}
		pushed := fmt.Sprintf(`{"specversion":"1.0","id":"grid-1","source":"/attacker","type":"Microsoft.ContainerRegistry.ImagePushed",`+
			`"data":{"action":"push","target":{"repository":"attack/app","tag":"1.0.0"},"request":{"host":%q}}}`, a.Registry)
		for name, h := range map[string]map[string]string{
			"no token":    {},
			"wrong token": {"Authorization": "Bearer " + a.Token + "-wrong"},
			"the origin":  {"Authorization": "eventgrid.azure.net", "WebHook-Request-Origin": "eventgrid.azure.net"},
		} {
			h["Content-Type"] = "application/cloudevents+json"
			if code, body := send(t, a.ScanURL+"/hook/eventgrid/default", strings.NewReader(pushed), h); code != http.StatusUnauthorized {
				t.Errorf("an Event Grid push, %s: %d %s, want 401", name, code, body)
			}
		}
		// With the token, a delete is read and ignored.
		deleted := strings.Replace(pushed, "ImagePushed", "ImageDeleted", 1)
		if code, body := send(t, a.ScanURL+"/hook/eventgrid/default", strings.NewReader(deleted), map[string]string{"Authorization": "Bearer " + a.Token}); code != http.StatusOK || !strings.Contains(body, "ignored") {
			t.Errorf("an Event Grid delete with the token: %d %s, want 200 ignored", code, body)
		}
		if b, _ := os.ReadFile(a.Log(stack.Scan)); strings.Contains(string(b), huge[:1024]) {
			t.Error("the scan function logged the oversized origin")
		}
		a.unchanged(t, before, "Event Grid's handshake and forged deliveries")
	})

	t.Run("unknown namespaces and wrong tokens look alike and cost one listing", func(t *testing.T) {
		body := fmt.Sprintf(`{"events":[{"id":"probe","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"attack/app","tag":"1.0.0"},"request":{"host":%q}}]}`, a.Registry)
		wrong := map[string]string{"Authorization": "Bearer " + a.Token + "-wrong"}
		codeWrong, answerWrong := send(t, a.ScanURL+"/hook/distribution/default", strings.NewReader(body), wrong)
		codeNone, answerNone := send(t, a.ScanURL+"/hook/distribution/no-such-namespace", strings.NewReader(body), wrong)
		if codeWrong != http.StatusUnauthorized || codeNone != codeWrong || stripTrace(answerNone) != stripTrace(answerWrong) {
			t.Errorf("wrong token: %d %s; unknown namespace: %d %s", codeWrong, answerWrong, codeNone, answerNone)
		}
		start := a.secretRequests(t)
		for i := range 300 {
			send(t, fmt.Sprintf("%s/hook/distribution/probe-%d", a.ScanURL, i), strings.NewReader(body), wrong)
		}
		// The listing is renewed at most once per period (10 s): the probes may straddle one
		// renewal.
		if n := a.secretRequests(t) - start; n > 2 {
			t.Errorf("300 probes of unknown namespaces cost %d Secret requests, want at most 2", n)
		}
		a.unchanged(t, before, "probes")
	})

	t.Run("delivery ids are remembered in bounded memory", func(t *testing.T) {
		// 120 authenticated deliveries whose ids are close to a megabyte each; the tags pushed
		// do not exist, so the scans they ask for change nothing.
		for i := range 120 {
			id := fmt.Sprintf("%d-%s", i, strings.Repeat("x", 1000000))
			body := fmt.Sprintf(`{"events":[{"id":%q,"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"attack/app","tag":"missing-%d"},"request":{"host":%q}}]}`, id, i, a.Registry)
			code, answer := send(t, a.ScanURL+"/hook/distribution/default", strings.NewReader(body), map[string]string{"Authorization": "Bearer " + a.Token})
			if code != http.StatusAccepted || len(answer) > 2048 {
				t.Fatalf("delivery %d: %d with a %d-byte answer", i, code, len(answer))
			}
		}
	})

	// Six concurrent 1 MiB envelopes of id-less events, the input that cost 8 CPU-seconds each
	// when parsing was quadratic: each is answered, within the memory bound checked below.
	// BenchmarkParseLargeEnvelope (internal/webhook) measures the parsing time.
	t.Run("1 MiB envelopes of id-less events are answered", func(t *testing.T) {
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				var b strings.Builder
				b.WriteString(`{"events":[`)
				for n := 0; b.Len() < 1<<20-300; n++ {
					if n > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, `{"action":"push","target":{"repository":"attack/app","tag":"w%d-%d"},"request":{"host":%q}}`, w, n, a.Registry)
				}
				b.WriteString(`]}`)
				code, answer := send(t, a.ScanURL+"/hook/distribution/default", strings.NewReader(b.String()), map[string]string{"Authorization": "Bearer " + a.Token})
				if code != http.StatusAccepted {
					t.Errorf("envelope %d: %d %s", w, code, answer)
				}
			})
		}
		wg.Wait()
	})

	t.Run("a replay with a new unsigned delivery header is a duplicate", func(t *testing.T) {
		body := fmt.Sprintf(`{"action":"published","package":{"name":"app","package_type":"CONTAINER","owner":{"login":"attack"},"package_version":{"version":"sha256:%064d","package_url":"%s:1.0.0","container_metadata":{"tag":{"name":"1.0.0"}}}}}`, 0, image)
		mac := hmac.New(sha256.New, []byte(a.Token))
		mac.Write([]byte(body))
		headers := func(delivery string) map[string]string {
			return map[string]string{
				"X-GitHub-Event": "package", "X-GitHub-Delivery": delivery, "Content-Type": "application/json",
				"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(mac.Sum(nil)),
			}
		}
		code, answer := send(t, a.ScanURL+"/hook/github/default", strings.NewReader(body), headers("first"))
		if code != http.StatusAccepted {
			t.Fatalf("signed GitHub delivery: %d %s", code, answer)
		}
		accepted := a.snapshot(t).annotation
		code, answer = send(t, a.ScanURL+"/hook/github/default", strings.NewReader(body), headers("second"))
		if code != http.StatusOK || !strings.Contains(answer, "duplicate") {
			t.Errorf("replay with a new X-GitHub-Delivery: %d %s, want 200 duplicate delivery", code, answer)
		}
		if got := a.snapshot(t).annotation; got != accepted {
			t.Errorf("the replay requested a scan again: annotation %s -> %s", accepted, got)
		}
	})

	t.Run("no secret reaches a status, an Event, a log line or an answer", func(t *testing.T) {
		const planted = "PLANTED-PROXY-PASSWORD"
		for name, data := range map[string]map[string]string{
			"socks-proxy": {"address": "socks5://user:" + planted + "-1@127.0.0.1:1080"},
			"dead-proxy":  {"address": "http://user:" + planted + "-2@127.0.0.1:9", "password": planted + "-3"},
		} {
			if _, err := a.Kube.Secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, StringData: data}); err != nil {
				t.Fatal(err)
			}
			repo := fmt.Sprintf(`apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: %[1]s
spec:
  image: %[2]s/secret/%[1]s
  interval: 1h
  insecure: true
  proxySecretRef:
    name: %[1]s
`, name, a.Registry)
			if _, err := a.Env.Apply(ctx, "default", []byte(repo)); err != nil {
				t.Fatal(err)
			}
		}
		var answers strings.Builder
		for _, name := range []string{"socks-proxy", "dead-proxy"} {
			body := fmt.Sprintf(`{"events":[{"id":"secret-%[1]s","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"secret/%[1]s","tag":"1.0.0"},"request":{"host":%[2]q}}]}`, name, a.Registry)
			code, answer := send(t, a.ScanURL+"/hook/distribution/default", strings.NewReader(body), map[string]string{"Authorization": "Bearer " + a.Token})
			if code != http.StatusAccepted {
				t.Fatalf("push for %s: %d %s", name, code, answer)
			}
			answers.WriteString(answer)
		}
		// Wait for both scans to fail into the status.
		var statuses string
		testenv.Eventually(t, 30*time.Second, func() error {
			statuses = ""
			failed := 0
			for _, name := range []string{"socks-proxy", "dead-proxy"} {
				r, err := a.Kube.Repositories.Get(ctx, "default", name)
				if err != nil {
					return err
				}
				b, _ := json.Marshal(r.Status)
				statuses += string(b)
				for _, c := range r.Status.Conditions {
					if c.Type == "Ready" && c.Status == metav1.ConditionFalse {
						failed++
					}
				}
			}
			if failed != 2 {
				return fmt.Errorf("the scans through the proxies have not failed: %s", statuses)
			}
			return nil
		})
		evs, err := a.Kube.Events.List(ctx, "default", metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventsJSON, _ := json.Marshal(evs.Items)
		places := map[string]string{"statuses": statuses, "Events": string(eventsJSON), "answers": answers.String()}
		for _, c := range []string{stack.Scan, stack.Policy, stack.Cron} {
			b, _ := os.ReadFile(a.Log(c))
			places[c+" log"] = string(b)
		}
		for place, text := range places {
			if strings.Contains(text, planted) {
				t.Errorf("the %s hold a planted password", place)
			}
		}
		if !strings.Contains(statuses, "socks5://") {
			t.Errorf("the status does not say which proxy failed: %s", statuses)
		}
	})

	t.Run("memory stays bounded", func(t *testing.T) {
		_, peak := a.rss(t)
		t.Logf("scan function: working set %d MiB after the first push, peak %d MiB through the attacks", baseline>>20, peak>>20)
		if limit := baseline + 64<<20; peak > limit {
			t.Errorf("scan function peak RSS %d MiB, over its working set %d MiB + 64 MiB", peak>>20, baseline>>20)
		}
		// No log line repeats an attacker's input whole.
		for _, c := range []string{stack.Scan, stack.Policy} {
			f, err := os.Open(a.Log(c))
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 4<<20), 4<<20)
			for sc.Scan() {
				if len(sc.Bytes()) > 8192 {
					t.Errorf("%s logged a %d-byte line: %.200s", c, len(sc.Bytes()), sc.Text())
				}
			}
			f.Close()
		}
	})
}

// stripTrace removes the trace id from a webhook answer, which differs per request.
func stripTrace(answer string) string {
	var a map[string]any
	if json.Unmarshal([]byte(answer), &a) != nil {
		return answer
	}
	delete(a, "traceId")
	b, _ := json.Marshal(a)
	return string(b)
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// waitLatest waits until policy's latestRef has tag want.
func waitLatest(t *testing.T, s *stack.Stack, policy, want string) {
	t.Helper()
	waitTagIn(t, s, "default", policy, want)
}

// waitTagIn waits until the ImagePolicy namespace/name resolves to tag.
func waitTagIn(t *testing.T, s *stack.Stack, namespace, name, tag string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		p, err := s.Kube.Policies.Get(context.Background(), namespace, name)
		if err != nil {
			return err
		}
		if got := refTag(p.Status.LatestRef); got != tag {
			return fmt.Errorf("ImagePolicy %s/%s: latest %s, want %s; logs in %s", namespace, name, got, tag, s.Log(stack.Scan))
		}
		return nil
	})
}

// policyTag returns the latestRef tag of the ImagePolicy namespace/name (refTag).
func policyTag(t *testing.T, s *stack.Stack, namespace, name string) string {
	t.Helper()
	p, err := s.Kube.Policies.Get(context.Background(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return refTag(p.Status.LatestRef)
}

// refTag returns the tag of ref, "<none>" for nil.
func refTag(ref *v1.ImageRef) string {
	if ref == nil {
		return "<none>"
	}
	return ref.Tag
}
