package stack_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/cloudauth"
	"github.com/imagereflector/reflector/internal/stack"
	"github.com/imagereflector/reflector/internal/testenv"
	"github.com/imagereflector/reflector/internal/testenv/clientset"
)

const cloudManifests = `apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: %[1]s
spec:
  image: %[2]s/team/app
  interval: 1h
  provider: %[3]s
  serviceAccountName: %[4]q
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: %[1]s
spec:
  imageRepositoryRef:
    name: %[1]s
  policy:
    semver:
      range: ^1.x
`

const ecrRole = "arn:aws:iam::123456789012:role/reflector-pull"

// TestCloudWebhooksEndToEndIntegration runs the whole system as processes against the cloud
// fakes: an ECR EventBridge event, an ACR push notification and an Artifact Registry Pub/Sub
// message each reach the ImagePolicy's latestRef through a scan that logged in to the cloud:
// ECR as the object's ServiceAccount (object-level workload identity), ACR with the scan
// function's managed identity, Artifact Registry with the metadata server's token.
func TestCloudWebhooksEndToEndIntegration(t *testing.T) {
	ctx := context.Background()
	clouds := testenv.NewClouds(t, nil)
	clouds.Setenv(t)
	env := append(clouds.ProcessEnv(t), "REFLECTOR_FEATURE_GATES="+cloudauth.ObjectLevelWorkloadIdentity+"=true")
	s := start(t, stack.Options{CronEvery: time.Hour, Env: map[string][]string{stack.Scan: env, stack.Policy: env}})
	clouds.ReviewWith(s.Env.Client(t).TokenReviews)

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ecr-puller", Namespace: "default",
		Annotations: map[string]string{cloudauth.AWSRoleARNAnnotation: ecrRole}}}
	if _, err := clientset.For(s.Env).CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clouds.AllowAWSRole(ecrRole, "default", "ecr-puller")
	for _, m := range [][4]string{
		{"ecr", testenv.ECRHost, "aws", "ecr-puller"},
		{"acr", testenv.ACRHost, "azure", ""},
		{"gar", testenv.GARHost, "gcp", ""},
	} {
		if _, err := s.Env.Apply(ctx, "default", fmt.Appendf(nil, cloudManifests, m[0], m[1], m[2], m[3])); err != nil {
			t.Fatal(err)
		}
	}

	pushes := map[string]func(tag string) *http.Request{
		"ecr": func(tag string) *http.Request {
			body := fmt.Sprintf(`{"version":"0","id":"ecr-%[1]s","detail-type":"ECR Image Action","source":"aws.ecr","account":"123456789012","region":"us-west-2","detail":{"result":"SUCCESS","action-type":"PUSH","repository-name":"team/app","image-tag":%[1]q}}`, tag)
			req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/ecr/default", bytes.NewBufferString(body))
			req.Header.Set("Authorization", "Bearer "+s.Token)
			return req
		},
		"acr": func(tag string) *http.Request {
			body := fmt.Sprintf(`{"id":"acr-%[1]s","action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","repository":"team/app","tag":%[1]q},"request":{"host":%[2]q}}`, tag, testenv.ACRHost)
			req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/acr/default", bytes.NewBufferString(body))
			req.Header.Set("Authorization", "Bearer "+s.Token)
			return req
		},
		"gar": func(tag string) *http.Request {
			data := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, `{"action":"INSERT","digest":"%[1]s/team/app@sha256:%[2]s","tag":"%[1]s/team/app:%[3]s"}`,
				testenv.GARHost, "6ec128e26cd5d9f1c5e4b4c1c4b8b1c6e5ff6c7b0f2e3d4a5b6c7d8e9f0a1b2c", tag))
			body := fmt.Sprintf(`{"message":{"data":%q,"messageId":"gar-%s"},"subscription":"projects/p/subscriptions/reflector"}`, data, tag)
			req, _ := http.NewRequest(http.MethodPost, s.ScanURL+"/hook/gar/default?token="+s.Token, bytes.NewBufferString(body))
			return req
		},
	}
	registries := map[string]*testenv.Registry{"ecr": clouds.ECR, "acr": clouds.ACR, "gar": clouds.GAR}
	for _, tag := range []string{"1.0.0", "1.1.0"} {
		for name, push := range pushes {
			registries[name].Push(t, "team/app", tag)
			req := push(tag)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s webhook answered %s", name, resp.Status)
			}
		}
		for name := range pushes {
			waitLatest(t, s, name, tag)
		}
	}
	// The second push of each cloud was scanned with cached credentials.
	counts := map[string]int{}
	for _, c := range clouds.Calls() {
		counts[c]++
	}
	for _, c := range []string{"aws:sts", "aws:ecr", "azure:msi", "azure:exchange", "gcp:metadata"} {
		if counts[c] != 1 {
			t.Errorf("%s called %d times, want once: %v", c, counts[c], clouds.Calls())
		}
	}
	// No credential reached the scan function's log.
	logs, err := os.ReadFile(s.Log(stack.Scan))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range clouds.Secrets() {
		if bytes.Contains(logs, []byte(secret)) {
			t.Error("the scan function's log shows a cloud credential")
		}
	}
}
