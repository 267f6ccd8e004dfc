package registry_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/cloudauth"
	_ "github.com/imagereflector/reflector/internal/cloudauth/awslogin"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/registry"
	"github.com/imagereflector/reflector/internal/testenv"
)

const (
	awsRole     = "arn:aws:iam::123456789012:role/reflector-pull"
	azureTenant = "72f988bf-0000-0000-0000-000000000001"
	azureClient = "5c0ffee0-0000-0000-0000-000000000002"
	gcpWIP      = "projects/123/locations/global/workloadIdentityPools/pool/providers/kube"
	gcpGSA      = "puller@reflector-test.iam.gserviceaccount.com"
)

// cloudFixture is the apiserver, the cloud fakes and a namespace for one test.
type cloudFixture struct {
	kube   *kube.Client
	ns     string
	clouds *testenv.Clouds
}

func newCloudFixture(t *testing.T) *cloudFixture {
	t.Helper()
	env := testenv.Kube(t)
	kc, ns := env.Client(t), env.Namespace(t)
	c := testenv.NewClouds(t, env.Client(t).TokenReviews)
	c.Setenv(t)
	for _, reg := range c.Registries() {
		reg.Push(t, "team/app", "1.0.0", "1.1.0")
	}
	return &cloudFixture{kube: kc, ns: ns, clouds: c}
}

// client returns a registry client whose cloud logins go through the fakes.
func (f *cloudFixture) client(opts ...cloudauth.Option) (*registry.Client, *cloudauth.Authenticator) {
	tr := f.clouds.Transport()
	auth := cloudauth.New(append([]cloudauth.Option{cloudauth.WithHTTPClient(&http.Client{Transport: tr})}, opts...)...)
	return fast(registry.WithTransport(tr), registry.WithCloudAuth(auth)), auth
}

func (f *cloudFixture) serviceAccount(t *testing.T, name string, annotations map[string]string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: annotations}}
	if _, err := f.kube.ServiceAccounts.Create(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
}

// tokenFile writes a token of ServiceAccount name for audience to a file, as the kubelet
// projects one into a pod.
func (f *cloudFixture) tokenFile(t *testing.T, name, audience string) string {
	t.Helper()
	tr, err := f.kube.ServiceAccounts.CreateToken(context.Background(), f.ns, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func cloudRepository(ns, provider, host, sa string) *v1.ImageRepository {
	return imageRepository(ns, host+"/team/app", func(o *v1.ImageRepository) {
		o.Spec.Provider = provider
		o.Spec.ServiceAccountName = sa
	})
}

// wantTags scans obj and expects the two tags every fake registry holds.
func (f *cloudFixture) wantTags(t *testing.T, c *registry.Client, obj *v1.ImageRepository) {
	t.Helper()
	res, err := scan(t, c, f.kube, obj)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	if !slices.Equal(res.Tags, []string{"1.0.0", "1.1.0"}) {
		t.Fatalf("tags %v", res.Tags)
	}
}

// azureWorkloadIdentity gives the scan function Azure workload identity, as AKS's webhook
// does: a federated token of its ServiceAccount that the Entra ID fake accepts for the test's
// tenant and client.
func (f *cloudFixture) azureWorkloadIdentity(t *testing.T) {
	t.Helper()
	f.clouds.AllowAzureIdentity(azureTenant, azureClient, f.ns, "reflector-scan", true)
	t.Setenv("AZURE_FEDERATED_TOKEN_FILE", f.tokenFile(t, "reflector-scan", cloudauth.AzureAudience))
	t.Setenv("AZURE_TENANT_ID", azureTenant)
	t.Setenv("AZURE_CLIENT_ID", azureClient)
}

// wantTagsThrough is wantTags, which must make exactly the cloud calls want.
func (f *cloudFixture) wantTagsThrough(t *testing.T, c *registry.Client, obj *v1.ImageRepository, want ...string) {
	t.Helper()
	before := len(f.clouds.Calls())
	f.wantTags(t, c, obj)
	if got := f.clouds.Calls()[before:]; !slices.Equal(got, want) {
		t.Errorf("cloud calls %v, want %v", got, want)
	}
}

// wantNoSecret checks that no credential the fakes issued shows in msg.
func (f *cloudFixture) wantNoSecret(t *testing.T, msg string) {
	t.Helper()
	for _, s := range f.clouds.Secrets() {
		if strings.Contains(msg, s) {
			t.Errorf("message shows a credential: %q", msg)
		}
	}
	if strings.Contains(msg, "eyJ") {
		t.Errorf("message shows a JWT: %q", msg)
	}
}

// TestIntegrationCloudObjectLevel logs in to ECR, ACR and Artifact Registry as annotated
// ServiceAccounts: the apiserver issues their tokens, the fakes review them and exchange them.
func TestIntegrationCloudObjectLevel(t *testing.T) {
	f := newCloudFixture(t)
	c, _ := f.client(cloudauth.WithObjectLevelIdentity(true))

	f.serviceAccount(t, "ecr", map[string]string{cloudauth.AWSRoleARNAnnotation: awsRole})
	f.clouds.AllowAWSRole(awsRole, f.ns, "ecr")
	f.serviceAccount(t, "acr", map[string]string{
		cloudauth.AzureTenantIDAnnotation: azureTenant, cloudauth.AzureClientIDAnnotation: azureClient})
	f.clouds.AllowAzureIdentity(azureTenant, azureClient, f.ns, "acr", true)
	f.serviceAccount(t, "gar", map[string]string{
		cloudauth.GCPWorkloadProviderAnnotation: gcpWIP, cloudauth.GCPServiceAccountAnnotation: gcpGSA})
	f.serviceAccount(t, "gke", map[string]string{cloudauth.GCPServiceAccountAnnotation: gcpGSA})
	f.clouds.AllowGCPServiceAccount(gcpGSA, f.ns, "gar")

	for _, tt := range []struct {
		provider, host, sa string
		calls              []string
	}{
		{v1.AWSProvider, testenv.ECRHost, "ecr", []string{"aws:sts", "aws:ecr"}},
		{v1.AzureProvider, testenv.ACRHost, "acr", []string{"azure:token", "azure:exchange"}},
		{v1.GCPProvider, testenv.GARHost, "gar", []string{"gcp:sts", "gcp:impersonate"}},
	} {
		t.Run(tt.provider, func(t *testing.T) {
			before := len(f.clouds.Calls())
			obj := cloudRepository(f.ns, tt.provider, tt.host, tt.sa)
			f.wantTags(t, c, obj)
			if got := f.clouds.Calls()[before:]; !slices.Equal(got, tt.calls) {
				t.Errorf("cloud calls %v, want %v", got, tt.calls)
			}
			// The credentials are cached per identity and registry: the next scan asks no cloud.
			f.wantTags(t, c, obj)
			if n := len(f.clouds.Calls()); n != before+len(tt.calls) {
				t.Errorf("a second scan called the cloud again: %v", f.clouds.Calls()[before:])
			}
		})
	}

	t.Run("aws China partition", func(t *testing.T) {
		role := "arn:aws-cn:iam::123456789012:role/reflector-pull"
		f.serviceAccount(t, "ecr-cn", map[string]string{cloudauth.AWSRoleARNAnnotation: role})
		f.clouds.AllowAWSRole(role, f.ns, "ecr-cn")
		// The SDK resolves STS and ECR in cn-north-1 under amazonaws.com.cn, which the proxy
		// routes to the fakes.
		t.Setenv("AWS_ENDPOINT_URL_STS", "")
		t.Setenv("AWS_ENDPOINT_URL_ECR", "")
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRChinaHost, "ecr-cn"), "aws:sts@cn-north-1", "aws:ecr@cn-north-1")
	})
	t.Run("azure China", func(t *testing.T) {
		// Without AZURE_AUTHORITY_HOST the registry's cloud names the Entra ID authority.
		t.Setenv("AZURE_AUTHORITY_HOST", "")
		before := len(f.clouds.Calls())
		f.wantTags(t, c, cloudRepository(f.ns, v1.AzureProvider, testenv.ACRChinaHost, "acr"))
		want := []string{"azure:token@login.chinacloudapi.cn", "azure:exchange@" + testenv.ACRChinaHost}
		if got := f.clouds.Calls()[before:]; !slices.Equal(got, want) {
			t.Errorf("cloud calls %v, want %v", got, want)
		}
	})

	t.Run("gcp on GKE without a provider annotation", func(t *testing.T) {
		f.clouds.AllowGCPServiceAccount(gcpGSA, f.ns, "gke")
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.GCPProvider, testenv.GARHost, "gke"), "gcp:sts", "gcp:impersonate")
	})
}

// TestIntegrationCloudControllerLevel logs in with the scan function's own identity, as each
// cloud's SDK finds it in the environment.
func TestIntegrationCloudControllerLevel(t *testing.T) {
	f := newCloudFixture(t)
	f.serviceAccount(t, "reflector-scan", nil)

	t.Run("aws IRSA", func(t *testing.T) {
		f.clouds.AllowAWSRole(awsRole, f.ns, "reflector-scan")
		t.Setenv("AWS_ROLE_ARN", awsRole)
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", f.tokenFile(t, "reflector-scan", cloudauth.AWSAudience))
		c, _ := f.client()
		before := len(f.clouds.Calls())
		f.wantTags(t, c, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, ""))
		f.wantTags(t, c, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRPublicHost, ""))
		if got := f.clouds.Calls()[before:]; !slices.Equal(got, []string{"aws:sts", "aws:ecr", "aws:sts", "aws:ecr-public"}) {
			t.Errorf("cloud calls %v", got)
		}
	})
	t.Run("aws EKS Pod Identity", func(t *testing.T) {
		f.clouds.AllowAWSPodIdentity(f.ns, "reflector-scan")
		t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f.clouds.AWSContainerCredentialsURL())
		t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", f.tokenFile(t, "reflector-scan", testenv.AWSPodIdentityAudience))
		c, _ := f.client()
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, ""), "aws:pod-identity", "aws:ecr")
	})
	t.Run("aws EKS Pod Identity refused", func(t *testing.T) {
		f.serviceAccount(t, "not-associated", nil)
		t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f.clouds.AWSContainerCredentialsURL())
		good := f.tokenFile(t, "reflector-scan", testenv.AWSPodIdentityAudience)
		for _, tt := range []struct {
			name, endpoint, tokenFile string
			messages                  []string
		}{
			{"token for another audience", "", f.tokenFile(t, "reflector-scan", cloudauth.AWSAudience),
				[]string{"EKS Pod Identity", "InvalidTokenException", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"}},
			{"no association", "", f.tokenFile(t, "not-associated", testenv.AWSPodIdentityAudience),
				[]string{"EKS Pod Identity", "ResourceNotFoundException", "pod identity association"}},
			{"missing token file", "", filepath.Join(t.TempDir(), "missing"),
				[]string{"EKS Pod Identity", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "no such file"}},
			{"no agent", "http://" + testenv.Refusing(t) + "/v1/credentials", good,
				[]string{"EKS Pod Identity", "did not answer", "connection refused", "EKS Pod Identity Agent add-on"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				if tt.endpoint != "" {
					t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", tt.endpoint)
				}
				t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tt.tokenFile)
				c, _ := f.client()
				before := len(f.clouds.Calls())
				_, err := scan(t, c, f.kube, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, ""))
				wantError(t, err, v1.AuthenticationFailedReason, tt.messages...)
				f.wantNoSecret(t, err.Error())
				if got := f.clouds.Calls()[before:]; len(got) != 0 {
					t.Errorf("cloud calls %v", got)
				}
			})
		}
	})
	t.Run("aws China partition", func(t *testing.T) {
		role := "arn:aws-cn:iam::123456789012:role/reflector-pull"
		f.clouds.AllowAWSRole(role, f.ns, "reflector-scan")
		t.Setenv("AWS_ROLE_ARN", role)
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", f.tokenFile(t, "reflector-scan", cloudauth.AWSAudience))
		// The SDK resolves the partition's own endpoints, sts and api.ecr in cn-north-1 under
		// amazonaws.com.cn, which the proxy routes to the fakes; any other name it refuses.
		t.Setenv("AWS_ENDPOINT_URL_STS", "")
		t.Setenv("AWS_ENDPOINT_URL_ECR", "")
		c, _ := f.client()
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRChinaHost, ""), "aws:sts@cn-north-1", "aws:ecr@cn-north-1")
	})
	t.Run("aws China partition with EKS Pod Identity and endpoint overrides", func(t *testing.T) {
		f.clouds.AllowAWSPodIdentity(f.ns, "reflector-scan")
		t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f.clouds.AWSContainerCredentialsURL())
		t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", f.tokenFile(t, "reflector-scan", testenv.AWSPodIdentityAudience))
		c, _ := f.client()
		before := len(f.clouds.Calls())
		// AWS_ENDPOINT_URL_ECR leads to loopback; the fake reads the region from the
		// signature's credential scope and answers for that region's registry.
		f.wantTags(t, c, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRChinaHost, ""))
		if got := f.clouds.Calls()[before:]; !slices.Equal(got, []string{"aws:pod-identity", "aws:ecr@cn-north-1"}) {
			t.Errorf("cloud calls %v", got)
		}
	})
	t.Run("azure workload identity", func(t *testing.T) {
		f.azureWorkloadIdentity(t)
		c, _ := f.client()
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.AzureProvider, testenv.ACRHost, ""), "azure:token", "azure:exchange")
	})
	t.Run("azure client secret", func(t *testing.T) {
		f.clouds.AllowAzureSecret(azureTenant, "app-client", "app-secret")
		t.Setenv("AZURE_TENANT_ID", azureTenant)
		t.Setenv("AZURE_CLIENT_ID", "app-client")
		t.Setenv("AZURE_CLIENT_SECRET", "app-secret")
		c, _ := f.client()
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.AzureProvider, testenv.ACRHost, ""), "azure:token", "azure:exchange")
	})
	t.Run("azure managed identity", func(t *testing.T) {
		c, _ := f.client()
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.AzureProvider, testenv.ACRHost, ""), "azure:msi", "azure:exchange")
	})
	for _, cloud := range []struct {
		host, authority string
	}{
		{testenv.ACRChinaHost, "login.chinacloudapi.cn"},
		{testenv.ACRGovHost, "login.microsoftonline.us"},
	} {
		t.Run("azure workload identity in "+cloud.host, func(t *testing.T) {
			f.azureWorkloadIdentity(t)
			// Without AZURE_AUTHORITY_HOST the registry's cloud names the authority, which
			// the proxy routes to the fake; it issues tokens for its own cloud's resource only.
			t.Setenv("AZURE_AUTHORITY_HOST", "")
			c, _ := f.client()
			f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.AzureProvider, cloud.host, ""),
				"azure:token@"+cloud.authority, "azure:exchange@"+cloud.host)
		})
		t.Run("azure workload identity in "+cloud.host+" signing in at the public cloud", func(t *testing.T) {
			f.azureWorkloadIdentity(t)
			// As AKS's workload identity webhook sets it in the public cloud.
			t.Setenv("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.com/")
			c, _ := f.client()
			before := len(f.clouds.Calls())
			_, err := scan(t, c, f.kube, cloudRepository(f.ns, v1.AzureProvider, cloud.host, ""))
			wantError(t, err, v1.AuthenticationFailedReason, "AADSTS500011",
				"AZURE_AUTHORITY_HOST https://login.microsoftonline.com/ is the authority of Azure's public cloud",
				cloud.host+" is a registry of", "https://"+cloud.authority+"/")
			f.wantNoSecret(t, err.Error())
			if got := f.clouds.Calls()[before:]; len(got) != 0 {
				t.Errorf("cloud calls %v", got)
			}
		})
		t.Run("azure managed identity in "+cloud.host, func(t *testing.T) {
			c, _ := f.client()
			before := len(f.clouds.Calls())
			f.wantTags(t, c, cloudRepository(f.ns, v1.AzureProvider, cloud.host, ""))
			want := []string{"azure:msi", "azure:exchange@" + cloud.host}
			if got := f.clouds.Calls()[before:]; !slices.Equal(got, want) {
				t.Errorf("cloud calls %v, want %v", got, want)
			}
		})
	}
	t.Run("gcp metadata server", func(t *testing.T) {
		c, _ := f.client()
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.GCPProvider, testenv.GARHost, ""), "gcp:metadata")
	})
	t.Run("gcp external account", func(t *testing.T) {
		f.clouds.AllowGCPServiceAccount(gcpGSA, f.ns, "reflector-scan")
		token := f.tokenFile(t, "reflector-scan", "https://iam.googleapis.com/"+gcpWIP)
		t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", f.clouds.GCPExternalAccount(t, gcpWIP, gcpGSA, token))
		c, _ := f.client()
		f.wantTagsThrough(t, c, cloudRepository(f.ns, v1.GCPProvider, testenv.GARHost, ""), "gcp:sts", "gcp:impersonate")
	})
}

// TestIntegrationCloudFailures checks that each way a cloud login fails ends in a reason and a
// message that says what to fix, and never in a credential.
func TestIntegrationCloudFailures(t *testing.T) {
	f := newCloudFixture(t)
	gated, _ := f.client(cloudauth.WithObjectLevelIdentity(true))
	ungated, _ := f.client()

	f.serviceAccount(t, "wrong-role", map[string]string{cloudauth.AWSRoleARNAnnotation: "arn:aws:iam::123456789012:role/other"})
	f.serviceAccount(t, "bare", nil)
	f.serviceAccount(t, "no-pull", map[string]string{
		cloudauth.AzureTenantIDAnnotation: azureTenant, cloudauth.AzureClientIDAnnotation: azureClient})
	f.clouds.AllowAzureIdentity(azureTenant, azureClient, f.ns, "no-pull", false)
	f.serviceAccount(t, "not-federated", map[string]string{
		cloudauth.AzureTenantIDAnnotation: azureTenant, cloudauth.AzureClientIDAnnotation: "other-client"})
	f.serviceAccount(t, "no-impersonation", map[string]string{
		cloudauth.GCPWorkloadProviderAnnotation: gcpWIP, cloudauth.GCPServiceAccountAnnotation: gcpGSA})
	f.clouds.AllowAWSRole(awsRole, f.ns, "ecr")

	tests := []struct {
		name     string
		client   *registry.Client
		obj      *v1.ImageRepository
		reason   string
		stalled  bool
		messages []string
	}{
		{"gate off", ungated, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, "bare"),
			v1.FeatureGateDisabledReason, true, []string{"ObjectLevelWorkloadIdentity", `spec.serviceAccountName "bare"`}},
		{"provider does not serve the host", gated, cloudRepository(f.ns, v1.AWSProvider, testenv.GARHost, ""),
			v1.UnsupportedProviderReason, true, []string{"us-docker.pkg.dev is not an ECR registry"}},
		{"wrong role", gated, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, "wrong-role"),
			v1.AuthenticationFailedReason, false, []string{"STS refused AssumeRoleWithWebIdentity", "role/other", "trust policy", "AccessDenied"}},
		{"missing role annotation", gated, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, "bare"),
			v1.AuthenticationFailedReason, false, []string{"has no annotation eks.amazonaws.com/role-arn"}},
		{"missing service account", gated, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, "ghost"),
			v1.AuthenticationFailedReason, false, []string{"serviceaccount " + f.ns + "/ghost not found"}},
		{"no aws credentials in the environment", gated, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, ""),
			v1.AuthenticationFailedReason, false, []string{"no usable credentials in the scan function's environment"}},
		{"missing azure annotations", gated, cloudRepository(f.ns, v1.AzureProvider, testenv.ACRHost, "bare"),
			v1.AuthenticationFailedReason, false, []string{"has no annotation azure.workload.identity/tenant-id"}},
		{"azure federation refused", gated, cloudRepository(f.ns, v1.AzureProvider, testenv.ACRHost, "not-federated"),
			v1.AuthenticationFailedReason, false, []string{"Entra ID refused the federated credential", "AADSTS700213", "api://AzureADTokenExchange"}},
		{"acr exchange refused", gated, cloudRepository(f.ns, v1.AzureProvider, testenv.ACRHost, "no-pull"),
			v1.AuthenticationFailedReason, false, []string{"x.azurecr.io refused to exchange", "AcrPull"}},
		{"gcp impersonation refused", gated, cloudRepository(f.ns, v1.GCPProvider, testenv.GARHost, "no-impersonation"),
			v1.AuthenticationFailedReason, false, []string{"iam.serviceAccounts.getAccessToken", cloudauth.GCPServiceAccountAnnotation}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scan(t, tt.client, f.kube, tt.obj)
			wantError(t, err, tt.reason, tt.messages...)
			if got := registry.Stalled(err); got != tt.stalled {
				t.Errorf("Stalled = %v, want %v", got, tt.stalled)
			}
			f.wantNoSecret(t, err.Error())
		})
	}
	for _, reg := range f.clouds.Registries() {
		if n := reg.RequestCount(); n != 0 {
			t.Errorf("%d requests reached a registry without credentials", n)
		}
	}
}

// TestIntegrationCloudDefaultServiceAccount checks the multi-tenant lockdown: objects without
// spec.serviceAccountName log in as the default ServiceAccount of their namespace, never as the
// scan function, and only with the feature gate on.
func TestIntegrationCloudDefaultServiceAccount(t *testing.T) {
	f := newCloudFixture(t)
	f.serviceAccount(t, "tenant", map[string]string{cloudauth.AWSRoleARNAnnotation: awsRole})
	f.clouds.AllowAWSRole(awsRole, f.ns, "tenant")

	off, _ := f.client(cloudauth.WithDefaultServiceAccount("tenant"))
	_, err := scan(t, off, f.kube, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, ""))
	wantError(t, err, v1.FeatureGateDisabledReason, `default serviceaccount "tenant"`, "REFLECTOR_DEFAULT_SERVICE_ACCOUNT")

	on, _ := f.client(cloudauth.WithDefaultServiceAccount("tenant"), cloudauth.WithObjectLevelIdentity(true))
	f.wantTags(t, on, cloudRepository(f.ns, v1.AWSProvider, testenv.ECRHost, ""))

	other := testenv.Kube(t).Namespace(t)
	_, err = scan(t, on, f.kube, cloudRepository(other, v1.AWSProvider, testenv.ECRHost, ""))
	wantError(t, err, v1.AuthenticationFailedReason, "the default serviceaccount: serviceaccount "+other+"/tenant not found")
}

// TestIntegrationCloudRenewal checks that cached credentials are renewed before they expire.
func TestIntegrationCloudRenewal(t *testing.T) {
	f := newCloudFixture(t)
	now := time.Now()
	clock := func() time.Time { return now }
	c, _ := f.client(cloudauth.WithClock(clock))
	obj := cloudRepository(f.ns, v1.GCPProvider, testenv.GARHost, "")
	f.wantTags(t, c, obj)
	f.wantTags(t, c, obj)
	if got := f.clouds.Calls(); !slices.Equal(got, []string{"gcp:metadata"}) {
		t.Fatalf("cloud calls %v", got)
	}
	// The metadata server's token lives an hour; 56 minutes later it is due for renewal.
	now = now.Add(56 * time.Minute)
	f.wantTags(t, c, obj)
	if got := f.clouds.Calls(); !slices.Equal(got, []string{"gcp:metadata", "gcp:metadata"}) {
		t.Fatalf("cloud calls %v", got)
	}
}

// TestIntegrationCloudConcurrentScansShareALogin: scans that miss the cache together ask the
// cloud once.
func TestIntegrationCloudConcurrentScansShareALogin(t *testing.T) {
	f := newCloudFixture(t)
	c, _ := f.client()
	obj := cloudRepository(f.ns, v1.GCPProvider, testenv.GARHost, "")
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			s, err := c.Prepare(context.Background(), f.kube, obj)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := f.clouds.Calls(); !slices.Equal(got, []string{"gcp:metadata"}) {
		t.Errorf("cloud calls %v, want one", got)
	}
}
