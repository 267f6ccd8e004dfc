package registry_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/egress"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fast returns a Client without rate limit and with millisecond backoff, so that tests of other
// behaviour do not wait on politeness.
func fast(opts ...registry.Option) *registry.Client {
	return registry.New(append([]registry.Option{
		registry.WithRateLimit(math.Inf(1), 1),
		registry.WithRetries(registry.DefaultMaxRetries, time.Millisecond, 10*time.Millisecond),
	}, opts...)...)
}

// reaching returns the options of a Client that reaches reg under its RegistryAlias name alias:
// a transport that dials the registry for it, and a guard that trusts the name as it is, so that
// it is never looked up.
func reaching(reg *testenv.Registry, alias string) []registry.Option {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = reg.DialContext
	return []registry.Option{registry.WithTransport(t), registry.WithEgress(egress.Allow("127.0.0.1/32", reg.HostAs(alias)))}
}

// imageRepository returns an ImageRepository of image in namespace ns with a 30s timeout.
func imageRepository(ns, image string, edits ...func(*v1.ImageRepository)) *v1.ImageRepository {
	obj := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1.ImageRepositorySpec{
			Image:    image,
			Interval: metav1.Duration{Duration: 5 * time.Minute},
			Timeout:  &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	for _, e := range edits {
		e(obj)
	}
	return obj
}

// scan prepares a scan of obj and lists its tags.
func scan(t testing.TB, c *registry.Client, kube *kube.Client, obj *v1.ImageRepository) (registry.Result, error) {
	t.Helper()
	s, err := c.Prepare(context.Background(), kube, obj)
	if err != nil {
		return registry.Result{}, err
	}
	defer s.Close()
	return s.ListTags(context.Background())
}

// apiserver returns a client of the shared test apiserver and a fresh namespace.
func apiserver(t *testing.T) (*kube.Client, string) {
	t.Helper()
	env := testenv.Kube(t)
	return env.Client(t), env.Namespace(t)
}

// createSecret creates the Secret key ("namespace/name") of type typ holding data.
func createSecret(t *testing.T, kc *kube.Client, key string, typ corev1.SecretType, data map[string][]byte) {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: typ, Data: data}
	if _, err := kc.Secrets.Create(context.Background(), sec); err != nil {
		t.Fatalf("creating secret %s/%s: %v", ns, name, err)
	}
}

// dockerConfig returns a .dockerconfigjson value with credentials for host.
func dockerConfig(host, username, password string) map[string][]byte {
	auth := base64.StdEncoding.EncodeToString([]byte(username + ":" + password))
	return map[string][]byte{
		corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, host, auth),
	}
}

// wantError checks that err is classified as reason and that its message says each of parts.
func wantError(t *testing.T, err error, reason string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", reason)
	}
	t.Logf("error: %v", err)
	if got := registry.Reason(err); got != reason {
		t.Errorf("Reason = %s, want %s; error: %v", got, reason, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// countPaths returns how many of reg's requests had a path containing part.
func countPaths(reg *testenv.Registry, part string) int {
	n := 0
	for _, r := range reg.Requests() {
		if strings.Contains(r.URI, part) {
			n++
		}
	}
	return n
}

// pings returns how many /v2/ pings reached reg.
func pings(reg *testenv.Registry) int {
	n := 0
	for _, r := range reg.Requests() {
		if r.URI == "/v2/" {
			n++
		}
	}
	return n
}
