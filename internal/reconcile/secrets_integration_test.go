package reconcile_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/reconcile/evaltest"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestScanIntegrationKeepsSecretsOut plants passwords in the Secrets, the spec and the sink of
// ImageRepositories whose scans fail because of them, and of ImagePolicies whose digest lookups
// fail, and checks that none of them appears in the objects, the namespace's Events, the log or
// the outcomes.
func TestScanIntegrationKeepsSecretsOut(t *testing.T) {
	env := testenv.Kube(t)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	open := testenv.NewRegistry(t)
	open.Push(t, "app", "1.0.0")
	locked := testenv.NewRegistry(t, testenv.RegistryBasicAuth("robot", "the-right-password"))
	locked.Push(t, "app", "1.0.0")
	dead := func() string { return testenv.Refusing(t) }

	// Passwords in Secrets and in the sink's URL; inSpec is written into spec.image, so the
	// objects show it there, but nowhere else.
	planted := []string{
		"PLANTED-PASSWORD-1", "PLANTED-PASSWORD-2", "PLANTED-PASSWORD-3", "PLANTED-PASSWORD-4",
		"PLANTED-PASSWORD-6",
	}
	const inSpec = "PLANTED-PASSWORD-5"
	secret := func(name string, typ corev1.SecretType, data map[string]string) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: typ, StringData: data}
		if _, err := c.Secrets.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	secret("socks-proxy", corev1.SecretTypeOpaque, map[string]string{
		"address": "socks5://user:PLANTED-PASSWORD-1@127.0.0.1:1080"})
	secret("dead-proxy", corev1.SecretTypeOpaque, map[string]string{
		"address": "http://user:PLANTED-PASSWORD-2@" + dead()})
	secret("dead-proxy-fields", corev1.SecretTypeOpaque, map[string]string{
		"address": "http://" + dead(), "username": "user", "password": "PLANTED-PASSWORD-3"})
	auth := base64.StdEncoding.EncodeToString([]byte("robot:PLANTED-PASSWORD-4"))
	secret("wrong-password", corev1.SecretTypeDockerConfigJson, map[string]string{
		corev1.DockerConfigJsonKey: fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, locked.Host(), auth)})

	tests := []struct {
		name   string
		image  string
		edit   func(*v1.ImageRepository)
		reason string
		says   string
	}{
		{"socks-proxy", open.Image("app"), proxy("socks-proxy"), v1.AuthenticationFailedReason,
			`address "socks5://xxxxx@127.0.0.1:1080" is not an http:// or https:// URL`},
		{"dead-proxy", open.Image("app"), proxy("dead-proxy"), v1.ReadOperationFailedReason, "connection refused"},
		{"dead-proxy-fields", open.Image("app"), proxy("dead-proxy-fields"), v1.ReadOperationFailedReason, "connection refused"},
		{"wrong-password", locked.Image("app"), func(r *v1.ImageRepository) {
			r.Spec.SecretRef = &v1.LocalObjectReference{Name: "wrong-password"}
		}, v1.AuthenticationFailedReason, "UNAUTHORIZED"},
		// spec.image is no place for credentials, and an error about it must not repeat them.
		{"image-userinfo", "user:" + inSpec + "@" + open.Image("app"), nil, v1.ImageURLInvalidReason, "should not contain a digest"},
		{"image-url", "https://user:" + inSpec + "@" + open.Image("app"), nil, v1.ImageURLInvalidReason, "should not start with URL scheme"},
	}

	var logs testenv.LogBuffer
	rec := kube.NewRecorder(c, "reflector-scan")
	shutdown := sync.OnceFunc(rec.Shutdown)
	t.Cleanup(shutdown)
	// The sink's URL carries a password too; announcing the one scan that succeeds fails and
	// is logged.
	sink, err := events.NewSender("http://user:PLANTED-PASSWORD-6@"+dead()+"/", events.SourceScan, nil)
	if err != nil {
		t.Fatal(err)
	}
	scanner := &reconcile.Scanner{
		Kube: c, Store: store.New(t.TempDir()), Sink: sink, Recorder: rec,
		Registry: registry.New(registry.WithRateLimit(0, 0), registry.WithRetries(1, time.Millisecond, 10*time.Millisecond)),
		// No redact.Handler: the scanner's own lines must be clean.
		Log: slog.New(slog.NewJSONHandler(&logs, nil)),
	}
	t.Cleanup(func() { scanner.Store.Close() })

	var outcomes []string
	for _, tt := range tests {
		repo := &v1.ImageRepository{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tt.name},
			Spec: v1.ImageRepositorySpec{Image: tt.image, Insecure: true, Interval: metav1.Duration{Duration: time.Hour},
				Timeout: &metav1.Duration{Duration: 10 * time.Second}},
		}
		if tt.edit != nil {
			tt.edit(repo)
		}
		if _, err := c.Repositories.Create(ctx, repo); err != nil {
			t.Fatal(err)
		}
		out, err := scanner.Scan(ctx, reconcile.ScanRequest{Namespace: ns, Name: tt.name})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		outcomes = append(outcomes, fmt.Sprintf("%+v", out))
		got, err := c.Repositories.Get(ctx, ns, tt.name)
		if err != nil {
			t.Fatal(err)
		}
		ready := apimeta.FindStatusCondition(got.Status.Conditions, v1.ReadyCondition)
		if out.Failure != tt.reason || ready == nil || ready.Reason != tt.reason || !strings.Contains(ready.Message, tt.says) {
			t.Errorf("%s: outcome %+v, Ready %+v; want %s saying %q", tt.name, out, ready, tt.reason, tt.says)
		}
	}

	// One scan that succeeds, so that the sink is called.
	if _, err := c.Repositories.Create(ctx, &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fine"},
		Spec:       v1.ImageRepositorySpec{Image: open.Image("app"), Insecure: true, Interval: metav1.Duration{Duration: time.Hour}},
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := scanner.Scan(ctx, reconcile.ScanRequest{Namespace: ns, Name: "fine"}); err != nil || !out.Changed {
		t.Fatalf("fine: %+v, %v", out, err)
	}
	if !strings.Contains(logs.String(), "announcing changed tags") {
		t.Errorf("the failed announcement is not logged:\n%s", logs.String())
	}

	// Policies that reflect digests through the same Secrets fail in their own status.
	ev := &reconcile.Evaluator{Kube: c, Store: scanner.Store, Registry: scanner.Registry, Recorder: rec, Log: scanner.Log}
	var policies []string
	for _, repo := range []string{"dead-proxy", "wrong-password"} {
		r, err := c.Repositories.Get(ctx, ns, repo)
		if err != nil {
			t.Fatal(err)
		}
		id, err := reconcile.RepositoryIdentity(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := scanner.Store.Put(ctx, reconcile.StoreKey(ns, repo), id, []string{"1.0.0"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Policies.Create(ctx, &v1.ImagePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: repo},
			Spec: v1.ImagePolicySpec{
				ImageRepositoryRef:     v1.NamespacedObjectReference{Name: repo},
				Policy:                 evaltest.Semver(">=1.0.0"),
				DigestReflectionPolicy: v1.ReflectAlways,
				Interval:               &metav1.Duration{Duration: time.Hour},
			},
		}); err != nil {
			t.Fatal(err)
		}
		out, err := ev.Evaluate(ctx, ns, repo)
		if err != nil || out.Result != reconcile.PolicyFailed || !strings.Contains(out.Message, "failed fetching digest") {
			t.Errorf("policy %s: %+v, %v", repo, out, err)
		}
		policies = append(policies, fmt.Sprintf("%+v", out))
	}

	shutdown()
	pols, err := c.Policies.List(ctx, ns, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policyJSON, err := json.Marshal(pols)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Repositories.List(ctx, ns, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, r := range list.Items {
		b, err := json.Marshal(r.Status)
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, string(b))
	}
	evs := waitWarnings(t, c, ns, len(tests)+len(policies))
	texts := map[string]string{
		"ImageRepositories":        string(objects),
		"ImageRepository statuses": strings.Join(statuses, "\n"),
		"ImagePolicies":            string(policyJSON),
		"policy outcomes":          strings.Join(policies, "\n"),
		"Events":                   evs,
		"the scanner's log":        logs.String(),
		"scan outcomes":            strings.Join(outcomes, "\n"),
	}
	for where, text := range texts {
		for _, p := range append(planted, inSpec) {
			if strings.Contains(text, p) && (p != inSpec || where != "ImageRepositories") {
				t.Errorf("%s show %s:\n%s", where, p, text)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("repository statuses: %s", strings.Join(statuses, "\n"))
	t.Logf("policies: %s", policyJSON)
	t.Logf("events: %s", evs)
}

// proxy sets spec.proxySecretRef.
func proxy(secret string) func(*v1.ImageRepository) {
	return func(r *v1.ImageRepository) { r.Spec.ProxySecretRef = &v1.LocalObjectReference{Name: secret} }
}

// waitWarnings waits until ns holds at least n Warning Events and returns all of its Events as
// JSON.
func waitWarnings(t *testing.T, c *kube.Client, ns string, n int) string {
	t.Helper()
	var list *corev1.EventList
	testenv.Eventually(t, 10*time.Second, func() error {
		var err error
		if list, err = c.Events.List(context.Background(), ns, metav1.ListOptions{}); err != nil {
			return err
		}
		warnings := 0
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning {
				warnings++
			}
		}
		if warnings < n {
			return fmt.Errorf("%d Warning Events in %s, want %d", warnings, ns, n)
		}
		return nil
	})
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
