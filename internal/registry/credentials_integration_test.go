package registry_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

// TestIntegrationCredentials reads credentials from Secrets and ServiceAccounts of a real
// kube-apiserver and presents them to a registry that requires basic authentication.
func TestIntegrationCredentials(t *testing.T) {
	reg := testenv.NewRegistry(t, testenv.RegistryBasicAuth("robot", "s3cret"))
	reg.Push(t, "app", "v1", "v2")
	kc, ns := apiserver(t)

	createSecret(t, kc, ns+"/pull", corev1.SecretTypeDockerConfigJson, dockerConfig(reg.Host(), "robot", "s3cret"))
	createSecret(t, kc, ns+"/pull-as-url", corev1.SecretTypeDockerConfigJson, dockerConfig("https://"+reg.Host()+"/v1/", "robot", "s3cret"))
	createSecret(t, kc, ns+"/wrong-password", corev1.SecretTypeDockerConfigJson, dockerConfig(reg.Host(), "robot", "guess"))
	createSecret(t, kc, ns+"/other-registry", corev1.SecretTypeDockerConfigJson, dockerConfig("ghcr.io", "robot", "s3cret"))
	createSecret(t, kc, ns+"/malformed", corev1.SecretTypeOpaque, map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":`)})
	// The syntax error sits inside the password; the message gives its offset, not the character.
	createSecret(t, kc, ns+"/broken-password", corev1.SecretTypeOpaque, map[string][]byte{
		corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg.Host() + `":{"username":"robot","password":"s3"Qret"}}}`)})
	createSecret(t, kc, ns+"/bad-auth", corev1.SecretTypeOpaque, map[string][]byte{
		corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg.Host() + `":{"auth":"not base64!"}}}`)})
	createSecret(t, kc, ns+"/opaque", corev1.SecretTypeOpaque, map[string][]byte{"token": []byte("x")})
	createServiceAccount(t, kc, ns, "puller", "other-registry", "pull")
	createServiceAccount(t, kc, ns, "no-match", "other-registry")
	createServiceAccount(t, kc, ns, "dangling", "gone")

	secretRef := func(name string) func(*v1.ImageRepository) {
		return func(o *v1.ImageRepository) { o.Spec.SecretRef = &v1.LocalObjectReference{Name: name} }
	}
	serviceAccount := func(name string) func(*v1.ImageRepository) {
		return func(o *v1.ImageRepository) { o.Spec.ServiceAccountName = name }
	}
	tests := []struct {
		name   string
		edit   func(*v1.ImageRepository)
		reason string
		says   []string
	}{
		{"secretRef", secretRef("pull"), "", nil},
		{"secretRef keyed by URL", secretRef("pull-as-url"), "", nil},
		{"the service account's second pull secret", serviceAccount("puller"), "", nil},
		{"no credentials", func(*v1.ImageRepository) {}, v1.AuthenticationFailedReason, []string{"UNAUTHORIZED"}},
		{"a service account without a matching pull secret", serviceAccount("no-match"), v1.AuthenticationFailedReason, []string{"UNAUTHORIZED"}},
		{"wrong password", secretRef("wrong-password"), v1.AuthenticationFailedReason, []string{"UNAUTHORIZED", "authentication required"}},
		{"missing secret", secretRef("gone"), v1.AuthenticationFailedReason, []string{"spec.secretRef: secret " + ns + "/gone not found"}},
		{"secret for another registry", secretRef("other-registry"), v1.AuthenticationFailedReason, []string{"has no credentials for registry " + reg.Host()}},
		{"malformed docker config", secretRef("malformed"), v1.AuthenticationFailedReason, []string{".dockerconfigjson is not a valid Docker config"}},
		{"a syntax error in a password", secretRef("broken-password"), v1.AuthenticationFailedReason, []string{".dockerconfigjson is not a valid Docker config: JSON syntax error at byte "}},
		{"auth that is not base64", secretRef("bad-auth"), v1.AuthenticationFailedReason, []string{"auth field", "not base64"}},
		{"secret of another kind", secretRef("opaque"), v1.AuthenticationFailedReason, []string{"no .dockerconfigjson key"}},
		{"missing service account", serviceAccount("nobody"), v1.AuthenticationFailedReason, []string{"serviceaccount " + ns + "/nobody not found"}},
		{"dangling pull secret", serviceAccount("dangling"), v1.AuthenticationFailedReason, []string{"secret " + ns + "/gone not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := scan(t, fast(), kc, imageRepository(ns, reg.Image("app"), tt.edit))
			if tt.reason != "" {
				wantError(t, err, tt.reason, tt.says...)
				if strings.Contains(err.Error(), "Q") {
					t.Errorf("the error shows a character of the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tags, []string{"v1", "v2"}) {
				t.Errorf("tags = %q, want [v1 v2]", res.Tags)
			}
		})
	}
}

// createServiceAccount creates a ServiceAccount in ns with the given image pull secrets.
func createServiceAccount(t *testing.T, kc *kube.Client, ns, name string, pullSecrets ...string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for _, s := range pullSecrets {
		sa.ImagePullSecrets = append(sa.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if _, err := kc.ServiceAccounts.Create(context.Background(), sa); err != nil {
		t.Fatalf("creating serviceaccount %s/%s: %v", ns, name, err)
	}
}
