package node

import (
	"strings"
	"testing"
	"time"
)

// The lines below have the shapes that kubelet v1.37, containerd 1.6 and Knative's queue-proxy
// write; the cluster tests read the real programs' logs with the same functions.

func TestKubeletMounted(t *testing.T) {
	log := `I1202 01:23:44.000001   4242 reconciler_common.go:251] "operationExecutor.VerifyControllerAttachedVolume started for volume \"store\"" pod="reflector-system/reflector-scan-00001-deployment-7d9f-abcde"
I1202 01:23:45.123456   4242 operation_generator.go:615] "MountVolume.SetUp succeeded for volume \"kube-api-access-x\" (UniqueName: \"kubernetes.io/projected/0a-kube-api-access-x\") pod \"reflector-scan-00001-deployment-7d9f-abcde\" (UID: \"0a\") " pod="reflector-system/reflector-scan-00001-deployment-7d9f-abcde"
I1202 01:23:45.654321   4242 operation_generator.go:615] "MountVolume.SetUp succeeded for volume \"store\" (UniqueName: \"kubernetes.io/local-volume/store-0\") pod \"reflector-scan-00001-deployment-7d9f-abcde\" (UID: \"0a\") " pod="reflector-system/reflector-scan-00001-deployment-7d9f-abcde"
I1202 01:23:46.000000   4242 operation_generator.go:615] "MountVolume.SetUp succeeded for volume \"kube-api-access-y\"" pod="reflector-system/reflector-policy-00001-deployment-1-fghij"
`
	got, err := kubeletMounted(strings.NewReader(log), "reflector-system", "reflector-scan-00001-deployment-7d9f-abcde", 2026)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 12, 2, 1, 23, 45, 654321000, time.Local)
	if !got.Equal(want) {
		t.Errorf("mounted at %s, want %s", got, want)
	}
	if got, _ := kubeletMounted(strings.NewReader(log), "other", "reflector-scan-00001-deployment-7d9f-abcde", 2026); !got.IsZero() {
		t.Errorf("a pod of another namespace mounted at %s", got)
	}
	if _, err := kubeletMounted(strings.NewReader(`"MountVolume.SetUp succeeded" pod="a/b"`), "a", "b", 2026); err == nil {
		t.Error("a line without klog's header was read")
	}
}

func TestContainerdStarted(t *testing.T) {
	log := `time="2026-12-02T01:23:45.700000000Z" level=info msg="RunPodsandbox for &PodSandboxMetadata{Name:web-1,Uid:0a,Namespace:team,Attempt:0,}"
time="2026-12-02T01:23:45.900000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:web-2,Uid:0b,Namespace:team,Attempt:0,} returns sandbox id \"s2\""
time="2026-12-02T01:23:46.100000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:web-1,Uid:0a,Namespace:team,Attempt:0,} returns sandbox id \"s1\""
time="2026-12-02T01:23:46.200000000Z" level=info msg="CreateContainer within sandbox \"s1\" for container &ContainerMetadata{Name:user-container,Attempt:0,}"
time="2026-12-02T01:23:46.300000000Z" level=info msg="CreateContainer within sandbox \"s1\" for &ContainerMetadata{Name:user-container,Attempt:0,} returns container id \"c1\""
time="2026-12-02T01:23:46.310000000Z" level=info msg="CreateContainer within sandbox \"s2\" for &ContainerMetadata{Name:user-container,Attempt:0,} returns container id \"c2\""
time="2026-12-02T01:23:46.320000000Z" level=info msg="StartContainer for \"c2\" returns successfully"
time="2026-12-02T01:23:46.500000000Z" level=info msg="StartContainer for \"c1\" returns successfully"
time="2026-12-02T01:23:46.600000000Z" level=info msg="CreateContainer within sandbox \"s1\" for &ContainerMetadata{Name:queue-proxy,Attempt:0,} returns container id \"c3\""
time="2026-12-02T01:23:46.900000000Z" level=info msg="StartContainer for \"c3\" returns successfully"
time="2026-12-02T01:23:47.000000000Z" level=error msg="StartContainer for \"c9\" failed" error="no such container"
`
	sandbox, started, err := containerdStarted(strings.NewReader(log), "team", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	at := func(ns int) time.Time { return time.Date(2026, 12, 2, 1, 23, 46, ns, time.UTC) }
	if !sandbox.Equal(at(100000000)) {
		t.Errorf("sandbox at %s, want %s", sandbox, at(100000000))
	}
	if len(started) != 2 || !started["user-container"].Equal(at(500000000)) || !started["queue-proxy"].Equal(at(900000000)) {
		t.Errorf("containers started %v, want user-container at .5 s and queue-proxy at .9 s", started)
	}
	if sandbox, started, _ := containerdStarted(strings.NewReader(log), "other", "web-1"); !sandbox.IsZero() || len(started) != 0 {
		t.Errorf("a pod of another namespace: sandbox %s, started %v", sandbox, started)
	}
}

func TestFirstRequest(t *testing.T) {
	log := `2026-12-02T01:23:47.000000001Z stderr F {"severity":"INFO","message":"Starting queue-proxy"}
2026-12-02T01:23:47.100000000Z stdout F not a request
2026-12-02T01:23:47.512000000Z stdout F {"httpRequest": {"requestMethod": "POST", "requestUrl": "/hook/distribution/team", "requestSize": "512", "status": 202, "responseSize": "0", "userAgent": "Go-http-client/1.1", "remoteIp": "10.244.0.9:4242", "serverIp": "10.244.0.12", "referer": "", "latency": "0.012003s", "protocol": "HTTP/1.1"}, "traceId": "]"}
2026-12-02T01:23:48.000000000Z stdout F {"httpRequest": {"requestMethod": "GET", "requestUrl": "/healthz", "status": 200, "latency": "0.001s"}}
`
	r, ok, err := firstRequest(strings.NewReader(log))
	if err != nil || !ok {
		t.Fatalf("firstRequest: %v, %v", ok, err)
	}
	end := time.Date(2026, 12, 2, 1, 23, 47, 512000000, time.UTC)
	if !r.End.Equal(end) || r.Latency != 12003*time.Microsecond || r.URL != "/hook/distribution/team" || r.Status != 202 {
		t.Errorf("first request %+v", r)
	}
	if !r.Start().Equal(end.Add(-12003 * time.Microsecond)) {
		t.Errorf("start %s", r.Start())
	}
	if _, ok, err := firstRequest(strings.NewReader("2026-12-02T01:23:47Z stdout F {}\n")); ok || err != nil {
		t.Errorf("a log without requests: %v, %v", ok, err)
	}
}
