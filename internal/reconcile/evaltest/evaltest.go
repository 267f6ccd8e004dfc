// Package evaltest runs a reconcile.Evaluator against a real apiserver and Badger directory,
// for the tests of internal/reconcile and of its verified selections, which link the
// signature verifiers apart.
package evaltest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/testenv"
)

// Fixture is a real apiserver and Badger directory, a read-write Store that plays the scan
// function, and an Evaluator that reads the directory through a read-only Store, records Events
// through a real Recorder and announces new latest images to a real CloudEvents sink.
type Fixture struct {
	Env    *testenv.Env
	NS     string
	Dir    string
	Kube   *kube.Client
	Writer *store.Store
	Reader *store.Store
	Rec    *kube.Recorder
	Sink   *LatestSink
	Logs   *testenv.LogBuffer
	Ev     *reconcile.Evaluator
	// ids holds the identity of each repository that repo created, by store key, which put
	// stores the tags under.
	IDs map[string]store.Identity
}

func New(t testing.TB) *Fixture {
	t.Helper()
	env := testenv.Kube(t)
	c := env.Client(t)
	dir := t.TempDir()
	f := &Fixture{
		Env: env, NS: env.Namespace(t), Dir: dir, Kube: c,
		Writer: store.New(dir, store.WithLinger(0)),
		Reader: store.New(dir, store.ReadOnly()),
		Rec:    kube.NewRecorder(c, "reflector-policy"),
		Sink:   NewLatestSink(t, http.StatusAccepted),
		Logs:   &testenv.LogBuffer{},
		IDs:    map[string]store.Identity{},
	}
	t.Cleanup(func() {
		f.Rec.Shutdown()
		f.Reader.Close()
		f.Writer.Close()
	})
	f.Ev = f.Evaluator(t)
	return f
}

// evaluator returns a new Evaluator over the fixture, as a restarted process would have.
func (f *Fixture) Evaluator(t testing.TB) *reconcile.Evaluator {
	t.Helper()
	return &reconcile.Evaluator{
		Kube: f.Kube, Store: f.Reader, Registry: registry.New(registry.WithRateLimit(0, 0)),
		Sink: f.Sink.Sender(t), Recorder: f.Rec,
		Log: slog.New(slog.NewJSONHandler(f.Logs, nil)),
	}
}

// repo creates an ImageRepository of image in namespace ns.
func (f *Fixture) Repo(t testing.TB, ns, name, image string, edits ...func(*v1.ImageRepository)) *v1.ImageRepository {
	t.Helper()
	r := &v1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ImageRepositorySpec{
			Image:    image,
			Interval: metav1.Duration{Duration: time.Hour},
			Timeout:  &metav1.Duration{Duration: 20 * time.Second},
		},
	}
	for _, e := range edits {
		e(r)
	}
	created, err := f.Kube.Repositories.Create(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	f.IDs[reconcile.StoreKey(ns, name)] = Identity(t, created)
	return created
}

// identity returns the identity a scan of r stores its tags under. A repository that no scan
// accepts (an invalid image) gets one of its UID and raw image, as tests still store tags for it.
func Identity(t testing.TB, r *v1.ImageRepository) store.Identity {
	t.Helper()
	id, err := reconcile.RepositoryIdentity(r)
	if err != nil {
		return store.Identity{UID: string(r.UID), Image: r.Spec.Image}
	}
	return id
}

// policy creates an ImagePolicy in namespace ns.
func (f *Fixture) Policy(t testing.TB, ns, name string, spec v1.ImagePolicySpec) *v1.ImagePolicy {
	t.Helper()
	p, err := f.Kube.Policies.Create(context.Background(), &v1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// edit changes the spec of a policy, which raises its generation.
func (f *Fixture) Edit(t testing.TB, ns, name string, change func(*v1.ImagePolicySpec)) {
	t.Helper()
	p := f.Get(t, ns, name)
	change(&p.Spec)
	if _, err := f.Kube.Policies.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// put stores tags for the repository ns/name as repo created it, as a scan does. A repository
// that does not exist gets an identity of its own.
func (f *Fixture) Put(t testing.TB, ns, name string, tags ...string) {
	t.Helper()
	key := reconcile.StoreKey(ns, name)
	id, ok := f.IDs[key]
	if !ok {
		id = store.Identity{UID: "never-created", Image: "ghcr.io/org/never-created"}
	}
	if _, _, err := f.Writer.Put(context.Background(), key, id, tags, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// seed writes a latestRef into the status of a policy, as an earlier evaluation would have.
func (f *Fixture) Seed(t testing.TB, ns, name string, ref *v1.ImageRef) {
	t.Helper()
	_, err := f.Kube.Policies.UpdateStatus(context.Background(), ns, name, func(p *v1.ImagePolicy) error {
		p.Status.LatestRef = ref
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *Fixture) Get(t testing.TB, ns, name string) *v1.ImagePolicy {
	t.Helper()
	p, err := f.Kube.Policies.Get(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// cached waits until the apiserver's watch cache, which EvaluateRepository lists from, holds
// each of the ImagePolicies (namespace/name) as they are now.
func (f *Fixture) Cached(t testing.TB, policies ...string) {
	t.Helper()
	want := map[string]string{}
	for _, key := range policies {
		ns, name, _ := strings.Cut(key, "/")
		want[key] = f.Get(t, ns, name).ResourceVersion
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		l, err := f.Kube.Policies.List(context.Background(), "", metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		have := map[string]string{}
		for _, p := range l.Items {
			have[p.Namespace+"/"+p.Name] = p.ResourceVersion
		}
		for key, rv := range want {
			if have[key] != rv {
				return fmt.Errorf("the watch cache has ImagePolicy %s at %q, not yet %s", key, have[key], rv)
			}
		}
		return nil
	})
}

func (f *Fixture) Evaluate(t testing.TB, ns, name string) reconcile.PolicyOutcome {
	t.Helper()
	out, err := f.Ev.Evaluate(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("Evaluate(%s/%s): %v", ns, name, err)
	}
	return out
}

// waitEvent waits for a Kubernetes Event about the policy name in f's namespace of the given
// type whose message contains msg.
func (f *Fixture) WaitEvent(t testing.TB, name, typ, reason, msg string) {
	t.Helper()
	ns := f.NS
	testenv.Eventually(t, 10*time.Second, func() error {
		list, err := f.Kube.Events.List(context.Background(), ns, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name,
		})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == v1.ImagePolicyKind && e.Type == typ && e.Reason == reason && strings.Contains(e.Message, msg) {
				return nil
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
		}
		return fmt.Errorf("no %s event %s %q about %s/%s; saw %q", typ, reason, msg, ns, name, seen)
	})
}

// wantReady is the outcome checkReady expects: Ready's status and reason, a part of its
// message, and whether the policy is stalled.
type WantReady struct {
	Status  metav1.ConditionStatus
	Reason  string
	Msg     string
	Stalled bool
}

// checkReady checks the Ready, Reconciling and Stalled conditions of a policy as Flux's
// conventions set them for the outcome want.
func CheckReady(t testing.TB, p *v1.ImagePolicy, want WantReady) {
	t.Helper()
	status, reason, msg, stalled := want.Status, want.Reason, want.Msg, want.Stalled
	ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition)
	if ready == nil {
		t.Fatalf("%s: no Ready condition: %+v", p.Name, p.Status)
	}
	if ready.Status != status || ready.Reason != reason || !strings.Contains(ready.Message, msg) {
		t.Errorf("%s: Ready = %s %s %q, want %s %s containing %q", p.Name, ready.Status, ready.Reason, ready.Message, status, reason, msg)
	}
	if ready.ObservedGeneration != p.Generation || p.Status.ObservedGeneration != p.Generation {
		t.Errorf("%s: observed generation %d (Ready %d), want %d", p.Name, p.Status.ObservedGeneration, ready.ObservedGeneration, p.Generation)
	}
	gotStalled := apimeta.IsStatusConditionTrue(p.Status.Conditions, v1.StalledCondition)
	gotReconciling := apimeta.IsStatusConditionTrue(p.Status.Conditions, v1.ReconcilingCondition)
	if gotStalled != stalled {
		t.Errorf("%s: Stalled = %v, want %v", p.Name, gotStalled, stalled)
	}
	if wantReconciling := status == metav1.ConditionFalse && !stalled; gotReconciling != wantReconciling {
		t.Errorf("%s: Reconciling = %v, want %v", p.Name, gotReconciling, wantReconciling)
	}
}

func SameRef(a, b *v1.ImageRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func RefString(r *v1.ImageRef) string {
	if r == nil {
		return "<nil>"
	}
	return r.String()
}

func Semver(r string) v1.ImagePolicyChoice {
	return v1.ImagePolicyChoice{SemVer: &v1.SemVerPolicy{Range: r}}
}

func Alphabetical(order string) v1.ImagePolicyChoice {
	return v1.ImagePolicyChoice{Alphabetical: &v1.AlphabeticalPolicy{Order: order}}
}

func Numerical(order string) v1.ImagePolicyChoice {
	return v1.ImagePolicyChoice{Numerical: &v1.NumericalPolicy{Order: order}}
}

func RefTo(name string) v1.NamespacedObjectReference {
	return v1.NamespacedObjectReference{Name: name}
}

// latestSink is a real CloudEvents receiver that records LatestChanged events and answers
// with a fixed status.
type LatestSink struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []events.LatestChanged
	code int
}

func NewLatestSink(t testing.TB, code int) *LatestSink {
	t.Helper()
	s := &LatestSink{code: code}
	accept := events.Handler(func(_ context.Context, e cloudevents.Event) error {
		if e.Type() != events.TypeLatestChanged {
			return events.ErrRejected
		}
		var data events.LatestChanged
		if err := events.Decode(e, &data); err != nil {
			return err
		}
		s.mu.Lock()
		s.got = append(s.got, data)
		s.mu.Unlock()
		return nil
	})
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.code != http.StatusAccepted {
			http.Error(w, "refused", s.code)
			return
		}
		accept.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *LatestSink) Sender(t testing.TB) *events.Sender {
	t.Helper()
	snd, err := events.NewSender(s.srv.URL, events.SourcePolicy, nil)
	if err != nil {
		t.Fatal(err)
	}
	return snd
}

// about returns the events received about the policy ns/name, in order.
func (s *LatestSink) About(ns, name string) []events.LatestChanged {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []events.LatestChanged
	for _, e := range s.got {
		if e.Namespace == ns && e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// Storeless returns an Evaluator like f's whose tag store holds no tags, only the key of f's
// directory: an evaluation that succeeds through it did not read the tags.
func (f *Fixture) Storeless(t testing.TB) *reconcile.Evaluator {
	t.Helper()
	key, err := f.Writer.ProofKey(false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reflector.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := store.New(dir, store.ReadOnly())
	t.Cleanup(func() { empty.Close() })
	ev := f.Evaluator(t)
	ev.Store = empty
	return ev
}
