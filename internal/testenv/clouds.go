package testenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// Real host names of the cloud registries that Clouds serves.
const (
	ECRHost = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
	// ECRPublicHost leads to the same registry as ECRHost, with the same credentials.
	ECRPublicHost = "public.ecr.aws"
	ACRHost       = "x.azurecr.io"
	GARHost       = "us-docker.pkg.dev"
	// ECRChinaHost is ECR in the AWS China partition, with its own credentials.
	ECRChinaHost = "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"
	// ACRChinaHost and ACRGovHost are ACR in Azure China and Azure US Government, each
	// accepting only tokens of its own cloud's Entra ID.
	ACRChinaHost = "x.azurecr.cn"
	ACRGovHost   = "x.azurecr.us"
)

// AWSPodIdentityAudience is the audience of the ServiceAccount token that EKS Pod Identity
// projects into pods and its agent hands to EKS Auth.
const AWSPodIdentityAudience = "pods.eks.amazonaws.com"

// ecrRegions are the regions whose ECR the fake serves, and the registry each leads to.
var ecrRegions = map[string]string{"us-west-2": ECRHost, "cn-north-1": ECRChinaHost}

// azureResources maps each Entra ID authority host to the Azure Resource Manager resource of
// its cloud, whose tokens the cloud's registries exchange; the fake's loopback authority
// (AZURE_AUTHORITY_HOST) stands for the public cloud.
var azureResources = map[string]string{
	"":                          "https://management.azure.com/",
	"login.microsoftonline.com": "https://management.azure.com/",
	"login.chinacloudapi.cn":    "https://management.chinacloudapi.cn/",
	"login.microsoftonline.us":  "https://management.usgovcloudapi.net/",
}

// acrResources maps each ACR host to the resource its cloud's tokens are for.
var acrResources = map[string]string{
	ACRHost:      "https://management.azure.com/",
	ACRChinaHost: "https://management.chinacloudapi.cn/",
	ACRGovHost:   "https://management.usgovcloudapi.net/",
}

// Facts of the fake GKE metadata server.
const (
	GCPProject  = "reflector-test"
	GCPLocation = "us-central1"
	GCPCluster  = "reflector"
)

// Clouds fakes, on loopback, the cloud services that logins to ECR, ACR and Artifact Registry
// go through: AWS STS, ECR and the EKS Pod Identity agent, Entra ID and managed identity,
// Google's STS, IAM credentials and metadata server. Each checks what the real one would:
// ServiceAccount tokens are reviewed by the apiserver for the cloud's audience, only identities
// granted with the Allow methods get credentials, ECR wants requests signed with keys the fakes
// issued for the region of the registry, and Entra ID tokens are for the resource of the cloud
// whose authority issued them. It also serves a registry under each cloud's real host name
// (ECRHost, ECRChinaHost, ACRHost, ACRChinaHost, ACRGovHost, GARHost) that wants the
// credentials its cloud issues, reached with Transport through a proxy that routes those names,
// the clouds' Entra ID authorities, the China partition's STS and ECR API endpoints
// and the Google API names to loopback with a test CA.
type Clouds struct {
	// ECR, ACR and GAR are the registries behind ECRHost, ACRHost and GARHost.
	ECR, ACR, GAR *Registry
	// ECRChina, ACRChina and ACRGov are the registries behind ECRChinaHost, ACRChinaHost and
	// ACRGovHost.
	ECRChina, ACRChina, ACRGov *Registry

	kube  TokenReviewer
	ca    *CA
	front *httptest.Server
	plain *httptest.Server
	proxy *RegistryProxy

	ecrPassword, acrPassword, gcpToken, identityHeader string
	// passwords holds the password of each registry host but ECRPublicHost, which shares
	// ECRHost's.
	passwords map[string]string

	mu          sync.Mutex
	calls       []string
	awsRoles    map[string]string
	awsPods     map[string]bool
	awsKeys     map[string]bool
	awsSecrets  []string
	azureIDs    map[string]azureGrant
	azureTokens map[string]azureIssued
	azureSecret map[string]string
	gcpAccounts map[string]string
	gcpFed      map[string]string
	deny        map[string]bool
}

type azureGrant struct {
	subject string
	pull    bool
}

// azureIssued is who an Entra ID or managed identity token was issued to ("msi" for managed
// identity, else tenant/client), and for which resource.
type azureIssued struct {
	who, resource string
}

// TokenReviewer asks an apiserver who a ServiceAccount token belongs to, as
// kube.Client.TokenReviews does.
type TokenReviewer interface {
	Create(ctx context.Context, review *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error)
}

// NewClouds starts the fakes and registries for the test; kube reviews ServiceAccount tokens
// (nil: set it later with ReviewWith, before any login).
func NewClouds(t testing.TB, kube TokenReviewer) *Clouds {
	t.Helper()
	c := &Clouds{
		kube:           kube,
		ecrPassword:    randomHex(16),
		acrPassword:    randomHex(16),
		gcpToken:       "ya29." + randomHex(16),
		identityHeader: randomHex(8),
		awsRoles:       map[string]string{},
		awsPods:        map[string]bool{},
		awsKeys:        map[string]bool{},
		azureIDs:       map[string]azureGrant{},
		azureTokens:    map[string]azureIssued{},
		azureSecret:    map[string]string{},
		gcpAccounts:    map[string]string{},
		gcpFed:         map[string]string{},
		deny:           map[string]bool{},
	}
	c.passwords = map[string]string{
		ECRHost: c.ecrPassword, ECRChinaHost: randomHex(16),
		ACRHost: c.acrPassword, ACRChinaHost: randomHex(16), ACRGovHost: randomHex(16),
		GARHost: c.gcpToken,
	}
	c.ECR = NewRegistry(t, RegistryBasicAuth("AWS", c.ecrPassword))
	c.ECRChina = NewRegistry(t, RegistryBasicAuth("AWS", c.passwords[ECRChinaHost]))
	c.ACR = NewRegistry(t, RegistryBasicAuth(acrUser, c.acrPassword))
	c.ACRChina = NewRegistry(t, RegistryBasicAuth(acrUser, c.passwords[ACRChinaHost]))
	c.ACRGov = NewRegistry(t, RegistryBasicAuth(acrUser, c.passwords[ACRGovHost]))
	c.GAR = NewRegistry(t, RegistryBasicAuth("oauth2accesstoken", c.gcpToken))
	ca, err := NewCA("testenv registry CA")
	if err != nil {
		t.Fatal(err)
	}
	c.ca = ca
	names := []string{ECRHost, ECRPublicHost, ECRChinaHost, ACRHost, ACRChinaHost, ACRGovHost, GARHost,
		"sts.googleapis.com", "iamcredentials.googleapis.com",
		"login.microsoftonline.com", "login.chinacloudapi.cn", "login.microsoftonline.us",
		"sts.cn-north-1.amazonaws.com.cn", "api.ecr.cn-north-1.amazonaws.com.cn"}
	cert, err := ca.Issue("clouds", names, false)
	if err != nil {
		t.Fatal(err)
	}
	c.front = httptest.NewUnstartedServer(http.HandlerFunc(c.serveFront))
	c.front.TLS = &tls.Config{Certificates: []tls.Certificate{cert.Pair}, MinVersion: tls.VersionTLS12}
	c.front.Config.ErrorLog = log.New(io.Discard, "", 0)
	c.front.StartTLS()
	t.Cleanup(c.front.Close)
	c.plain = httptest.NewServer(http.HandlerFunc(c.servePlain))
	t.Cleanup(c.plain.Close)
	c.proxy = NewRegistryProxy(t, "", "")
	for _, n := range names {
		c.proxy.Route(n+":443", c.front.Listener.Addr().String())
	}
	return c
}

// acrUser is the user name that goes with an ACR refresh token.
const acrUser = "00000000-0000-0000-0000-000000000000"

// registry returns the registry behind host, one of the real host names Clouds serves.
func (c *Clouds) registry(host string) *Registry {
	switch host {
	case ECRHost, ECRPublicHost:
		return c.ECR
	case ECRChinaHost:
		return c.ECRChina
	case ACRHost:
		return c.ACR
	case ACRChinaHost:
		return c.ACRChina
	case ACRGovHost:
		return c.ACRGov
	case GARHost:
		return c.GAR
	}
	return nil
}

// Registries returns every registry Clouds serves.
func (c *Clouds) Registries() []*Registry {
	return []*Registry{c.ECR, c.ECRChina, c.ACR, c.ACRChina, c.ACRGov, c.GAR}
}

// AWSContainerCredentialsURL is the fake EKS Pod Identity agent, for
// AWS_CONTAINER_CREDENTIALS_FULL_URI: it wants, as Authorization, a ServiceAccount token for
// AWSPodIdentityAudience of a ServiceAccount allowed with AllowAWSPodIdentity.
func (c *Clouds) AWSContainerCredentialsURL() string { return c.plain.URL + "/v1/credentials" }

// ReviewWith sets the apiserver that reviews ServiceAccount tokens, for fakes started before it.
func (c *Clouds) ReviewWith(kube TokenReviewer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kube = kube
}

// ProcessEnv returns what a reflector process started by the test needs, besides Setenv's
// variables, to reach the registries and Google's APIs as Transport does: HTTPS_PROXY naming
// the routing proxy (loopback addresses bypass it) and SSL_CERT_FILE holding the test CA.
func (c *Clouds) ProcessEnv(t testing.TB) []string {
	path := filepath.Join(t.TempDir(), "clouds-ca.pem")
	if err := os.WriteFile(path, c.ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"HTTPS_PROXY=" + c.proxy.URL(), "SSL_CERT_FILE=" + path, "NO_PROXY=", "no_proxy=", "https_proxy="}
}

// Transport reaches the registries and Google's APIs by their real names through the routing
// proxy, and trusts the test CA that signed their certificates.
func (c *Clouds) Transport() *http.Transport {
	proxy, _ := url.Parse(c.proxy.URL())
	return &http.Transport{
		Proxy:               http.ProxyURL(proxy),
		TLSClientConfig:     &tls.Config{RootCAs: c.ca.Pool(), MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 10,
	}
}

// Setenv points every SDK at the fakes and away from the machine's own settings and metadata
// services, for the rest of the test: AWS service endpoints, no EC2 metadata and no shared
// config files; the Entra ID authority; the GCE metadata host and no gcloud configuration.
// The controller's own identity is left unset, container credentials (ECS, EKS Pod Identity)
// included; tests set it as they need. A test that clears an AWS endpoint variable to let the
// SDK resolve a real endpoint name reaches it only through Transport's proxy, which routes the
// names Clouds serves and refuses all others.
func (c *Clouds) Setenv(t testing.TB) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_STS":                   c.plain.URL,
		"AWS_ENDPOINT_URL_ECR":                   c.plain.URL,
		"AWS_ENDPOINT_URL_ECR_PUBLIC":            c.plain.URL,
		"AWS_EC2_METADATA_DISABLED":              "true",
		"AWS_CONFIG_FILE":                        filepath.Join(dir, "aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE":            filepath.Join(dir, "aws-credentials"),
		"AWS_ACCESS_KEY_ID":                      "",
		"AWS_SECRET_ACCESS_KEY":                  "",
		"AWS_SESSION_TOKEN":                      "",
		"AWS_ROLE_ARN":                           "",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN":      "",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "",
		"AWS_ENDPOINT_URL":                       "",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS":    "",
		"AWS_USE_FIPS_ENDPOINT":                  "",
		"AWS_USE_DUALSTACK_ENDPOINT":             "",
		"AWS_DEFAULT_REGION":                     "",
		"AWS_PROFILE":                            "",
		"AWS_REGION":                             "",
		"AWS_CA_BUNDLE":                          "",
		"AZURE_AUTHORITY_HOST":                   c.front.URL + "/",
		"AZURE_FEDERATED_TOKEN_FILE":             "",
		"AZURE_CLIENT_ID":                        "",
		"AZURE_TENANT_ID":                        "",
		"AZURE_CLIENT_SECRET":                    "",
		"IDENTITY_ENDPOINT":                      c.plain.URL + "/msi/token",
		"IDENTITY_HEADER":                        c.identityHeader,
		"GCE_METADATA_HOST":                      c.plain.Listener.Addr().String(),
		"GOOGLE_APPLICATION_CREDENTIALS":         "",
		"CLOUDSDK_CONFIG":                        filepath.Join(dir, "gcloud"),
	} {
		t.Setenv(k, v)
	}
}

// GCPExternalAccount writes an application default credentials file of type external_account
// that exchanges the token in tokenFile through the workload identity provider wip at the
// fake's loopback STS, impersonating gsa, and returns its path.
func (c *Clouds) GCPExternalAccount(t testing.TB, wip, gsa, tokenFile string) string {
	cfg := map[string]any{
		"type":               "external_account",
		"audience":           "//iam.googleapis.com/" + wip,
		"subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
		"token_url":          c.front.URL + "/v1/token",
		"service_account_impersonation_url": c.front.URL +
			"/v1/projects/-/serviceAccounts/" + gsa + ":generateAccessToken",
		"credential_source": map[string]any{"file": tokenFile},
	}
	b, _ := json.Marshal(cfg)
	path := filepath.Join(t.TempDir(), "adc.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// AllowAWSRole lets ServiceAccount namespace/name assume role with a web identity token.
func (c *Clouds) AllowAWSRole(role, namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.awsRoles[role] = serviceAccountUser(namespace, name)
}

// AllowAWSPodIdentity associates ServiceAccount namespace/name with an IAM role through EKS Pod
// Identity: the agent hands its pods credentials.
func (c *Clouds) AllowAWSPodIdentity(namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.awsPods[serviceAccountUser(namespace, name)] = true
}

// AllowAzureIdentity lets ServiceAccount namespace/name sign in as client of tenant, and the
// client pull from ACRHost if pull is set.
func (c *Clouds) AllowAzureIdentity(tenant, client, namespace, name string, pull bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.azureIDs[tenant+"/"+client] = azureGrant{subject: serviceAccountUser(namespace, name), pull: pull}
}

// AllowAzureSecret lets the application client of tenant sign in with secret and pull from
// ACRHost.
func (c *Clouds) AllowAzureSecret(tenant, client, secret string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.azureSecret[tenant+"/"+client] = secret
	c.azureIDs[tenant+"/"+client] = azureGrant{pull: true}
}

// AllowGCPServiceAccount lets ServiceAccount namespace/name impersonate the Google service
// account gsa.
func (c *Clouds) AllowGCPServiceAccount(gsa, namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gcpAccounts[gsa] = serviceAccountUser(namespace, name)
}

// Deny makes the fake refuse a kind of call (one of the names Calls returns) until the test
// allows it again with Deny(call, false).
func (c *Clouds) Deny(call string, deny bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deny[call] = deny
}

// Calls returns the calls the fakes answered with credentials, in order: aws:sts,
// aws:pod-identity, aws:ecr, aws:ecr-public, azure:token, azure:msi, azure:exchange, gcp:sts,
// gcp:impersonate, gcp:metadata. A call to a sovereign cloud names it: aws:sts@cn-north-1,
// aws:ecr@cn-north-1, azure:token@login.chinacloudapi.cn, azure:exchange@x.azurecr.cn.
func (c *Clouds) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// Secrets returns every credential the fakes issue to reflector, so that tests can check that
// none is shown in a status, an Event or a log.
func (c *Clouds) Secrets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for _, p := range c.passwords {
		s = append(s, p)
	}
	s = append(s, c.awsSecrets...)
	for k := range c.azureTokens {
		s = append(s, k)
	}
	for k := range c.gcpFed {
		s = append(s, k)
	}
	return s
}

func (c *Clouds) record(call string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deny[call] {
		return false
	}
	c.calls = append(c.calls, call)
	return true
}

func serviceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// review asks the apiserver whose ServiceAccount token this is, for audience.
func (c *Clouds) review(ctx context.Context, token, audience string) (string, bool) {
	c.mu.Lock()
	kube := c.kube
	c.mu.Unlock()
	tr, err := kube.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	})
	if err != nil || !tr.Status.Authenticated {
		return "", false
	}
	return tr.Status.User.Username, true
}

// servePlain answers the plain-HTTP endpoints: AWS STS and ECR, the EKS Pod Identity agent,
// managed identity, and the GCE metadata server.
func (c *Clouds) servePlain(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/computeMetadata/v1/"):
		c.serveMetadata(w, r)
	case r.URL.Path == "/msi/token":
		c.serveManagedIdentity(w, r)
	case r.URL.Path == "/v1/credentials":
		c.servePodIdentity(w, r)
	default:
		c.serveAWS(w, r, "")
	}
}

// serveAWS answers STS and ECR, told apart by X-Amz-Target; region is that of the endpoint's
// real name, or empty where an AWS_ENDPOINT_URL_* variable led the SDK to loopback.
func (c *Clouds) serveAWS(w http.ResponseWriter, r *http.Request, region string) {
	switch target := r.Header.Get("X-Amz-Target"); {
	case strings.HasPrefix(target, "AmazonEC2ContainerRegistry_V20150921."):
		c.serveECR(w, r, "ecr", region)
	case strings.HasPrefix(target, "SpencerFrontendService."):
		c.serveECR(w, r, "ecr-public", region)
	default:
		c.serveSTS(w, r, region)
	}
}

// servePodIdentity answers as the EKS Pod Identity agent: the Authorization header carries the
// pod's ServiceAccount token, which EKS Auth accepts for ServiceAccounts with an association.
func (c *Clouds) servePodIdentity(w http.ResponseWriter, r *http.Request) {
	token := r.Header.Get("Authorization")
	if token == "" {
		awsJSONError(w, http.StatusBadRequest, "InvalidParameterException", "Service account token cannot be empty")
		return
	}
	subject, ok := c.review(r.Context(), token, AWSPodIdentityAudience)
	if !ok {
		awsJSONError(w, http.StatusUnauthorized, "InvalidTokenException", "The service account token is not valid for audience "+AWSPodIdentityAudience)
		return
	}
	c.mu.Lock()
	associated := c.awsPods[subject]
	c.mu.Unlock()
	if !associated || !c.record("aws:pod-identity") {
		awsJSONError(w, http.StatusBadRequest, "ResourceNotFoundException", "No Pod Identity Association found for "+subject)
		return
	}
	key, secret, session := c.awsCredentials("ASIAPOD")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"AccessKeyId": key, "SecretAccessKey": secret, "Token": session, "AccountId": "123456789012",
		"Expiration": time.Now().Add(6 * time.Hour).UTC().Format(time.RFC3339),
	})
}

func awsJSONError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": message})
}

func (c *Clouds) serveSTS(w http.ResponseWriter, r *http.Request, region string) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("Action") != "AssumeRoleWithWebIdentity" {
		awsQueryError(w, http.StatusBadRequest, "InvalidAction", "unsupported action")
		return
	}
	role := r.PostForm.Get("RoleArn")
	subject, ok := c.review(r.Context(), r.PostForm.Get("WebIdentityToken"), "sts.amazonaws.com")
	if !ok {
		awsQueryError(w, http.StatusBadRequest, "InvalidIdentityToken", "The web identity token is not valid for audience sts.amazonaws.com")
		return
	}
	c.mu.Lock()
	allowed := c.awsRoles[role] == subject
	c.mu.Unlock()
	if !allowed || !c.record(regional("aws:sts", region)) {
		awsQueryError(w, http.StatusForbidden, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
		return
	}
	key, secret, session := c.awsCredentials("ASIA")
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>
<Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>
<SubjectFromWebIdentityToken>%s</SubjectFromWebIdentityToken><AssumedRoleUser><Arn>%s</Arn><AssumedRoleId>AROA:%s</AssumedRoleId></AssumedRoleUser>
</AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleWithWebIdentityResponse>`,
		key, secret, session, time.Now().Add(time.Hour).UTC().Format(time.RFC3339), xmlText(subject), xmlText(role), xmlText(subject))
}

// awsCredentials issues temporary AWS credentials whose access key id starts with prefix:
// ECR takes requests signed with them.
func (c *Clouds) awsCredentials(prefix string) (key, secret, session string) {
	key = prefix + strings.ToUpper(randomHex((20-len(prefix))/2))
	secret, session = randomHex(20), randomHex(20)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.awsKeys[key] = true
	c.awsSecrets = append(c.awsSecrets, secret, session)
	return key, secret, session
}

func awsQueryError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>1</RequestId></ErrorResponse>`, code, xmlText(message))
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// sigV4Scope reads the access key id, region and service of a SigV4 Authorization header's
// credential scope.
var sigV4Scope = regexp.MustCompile(`Credential=([A-Z0-9]+)/[0-9]{8}/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request`)

// regional names a call to the sovereign partition's endpoint in region; calls in the public
// partition keep their plain name.
func regional(call, region string) string {
	if strings.HasPrefix(region, "cn-") {
		return call + "@" + region
	}
	return call
}

// serveECR issues a registry password to callers that signed with credentials from the STS or
// Pod Identity fakes, for the registry of the region in the signature's credential scope, as
// ECR does: its tokens are good only in the region they were asked in. endpointRegion is the
// region of the API endpoint's real name, which the scope must match.
func (c *Clouds) serveECR(w http.ResponseWriter, r *http.Request, service, endpointRegion string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	fail := func(code, message string) {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": message})
	}
	m := sigV4Scope.FindStringSubmatch(r.Header.Get("Authorization"))
	c.mu.Lock()
	known := m != nil && c.awsKeys[m[1]]
	c.mu.Unlock()
	if !known {
		fail("UnrecognizedClientException", "The security token included in the request is invalid.")
		return
	}
	region, signedFor := m[2], m[3]
	host, served := ecrRegions[region]
	switch {
	case signedFor != service:
		fail("InvalidSignatureException", "Credential should be scoped to correct service: '"+service+"'.")
		return
	case endpointRegion != "" && region != endpointRegion:
		fail("InvalidSignatureException", "Credential should be scoped to a valid region.")
		return
	case service == "ecr-public" && region != "us-east-1":
		fail("InvalidSignatureException", "Credential should be scoped to a valid region, not '"+region+"'.")
		return
	case service == "ecr" && !served:
		fail("InvalidSignatureException", "Credential should be scoped to a valid region, not '"+region+"'.")
		return
	}
	call := regional("aws:"+service, region)
	if !c.record(call) {
		fail("AccessDeniedException", "not authorized to perform: ecr:GetAuthorizationToken")
		return
	}
	expires := float64(time.Now().Add(12 * time.Hour).Unix())
	if service == "ecr-public" {
		token := base64.StdEncoding.EncodeToString([]byte("AWS:" + c.ecrPassword))
		_ = json.NewEncoder(w).Encode(map[string]any{"authorizationData": map[string]any{"authorizationToken": token, "expiresAt": expires}})
		return
	}
	token := base64.StdEncoding.EncodeToString([]byte("AWS:" + c.passwords[host]))
	_ = json.NewEncoder(w).Encode(map[string]any{"authorizationData": []any{map[string]any{
		"authorizationToken": token, "expiresAt": expires, "proxyEndpoint": "https://" + host}}})
}

func (c *Clouds) serveManagedIdentity(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-IDENTITY-HEADER") != c.identityHeader || !c.record("azure:msi") {
		oauthError(w, http.StatusUnauthorized, "invalid_request", "missing or wrong X-IDENTITY-HEADER")
		return
	}
	token := "aad-msi-" + randomHex(16)
	c.mu.Lock()
	c.azureTokens[token] = azureIssued{who: "msi", resource: r.URL.Query().Get("resource")}
	c.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": token, "expires_on": fmt.Sprint(time.Now().Add(time.Hour).Unix()), "resource": r.URL.Query().Get("resource")})
}

func (c *Clouds) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "missing Metadata-Flavor", http.StatusForbidden)
		return
	}
	w.Header().Set("Metadata-Flavor", "Google")
	switch strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/") {
	case "instance/service-accounts/default/token":
		if !c.record("gcp:metadata") {
			http.Error(w, "denied", http.StatusForbidden)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": c.gcpToken, "expires_in": 3599, "token_type": "Bearer"})
	case "project/project-id":
		_, _ = io.WriteString(w, GCPProject)
	case "instance/attributes/cluster-location":
		_, _ = io.WriteString(w, GCPLocation)
	case "instance/attributes/cluster-name":
		_, _ = io.WriteString(w, GCPCluster)
	default:
		http.NotFound(w, r)
	}
}

// awsEndpoint matches the real names of the AWS API endpoints that Clouds serves.
var awsEndpoint = regexp.MustCompile(`^(sts|api\.ecr)\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)

// serveFront answers the TLS names: the registries, the AWS China partition's STS and ECR
// endpoints, Google's STS and IAM credentials, the clouds' Entra ID authorities, and
// on the loopback address the public Entra ID authority and Google's STS again (for token_url).
func (c *Clouds) serveFront(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	_, acr := acrResources[host]
	m := awsEndpoint.FindStringSubmatch(host)
	switch {
	case m != nil:
		c.serveAWS(w, r, m[2])
	case acr && r.URL.Path == "/oauth2/exchange":
		c.serveACRExchange(w, r, host)
	case c.registry(host) != nil:
		forward(w, r, c.registry(host))
	case r.URL.Path == "/v1/token":
		c.serveGoogleSTS(w, r)
	case strings.HasSuffix(r.URL.Path, ":generateAccessToken"):
		c.serveImpersonation(w, r)
	case strings.HasSuffix(r.URL.Path, "/oauth2/v2.0/token"):
		c.serveEntraToken(w, r, host)
	default:
		http.NotFound(w, r)
	}
}

func forward(w http.ResponseWriter, r *http.Request, reg *Registry) {
	target, _ := url.Parse("http://" + reg.Host())
	(&httputil.ReverseProxy{Rewrite: func(p *httputil.ProxyRequest) { p.SetURL(target) }}).ServeHTTP(w, r)
}

func oauthError(w http.ResponseWriter, status int, code, description string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": description})
}

// serveEntraToken answers the token endpoint of the Entra ID authority at host (an address for
// the loopback authority), which issues tokens for its own cloud's resources only.
func (c *Clouds) serveEntraToken(w http.ResponseWriter, r *http.Request, host string) {
	authority := host
	if net.ParseIP(host) != nil {
		authority = ""
	}
	resource, served := azureResources[authority]
	if !served {
		http.NotFound(w, r)
		return
	}
	tenant := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/oauth2/v2.0/token")
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return
	}
	f := r.PostForm
	if f.Get("scope") != resource+".default" {
		oauthError(w, http.StatusBadRequest, "invalid_scope", "AADSTS500011: The resource principal named "+strings.TrimSuffix(f.Get("scope"), ".default")+" was not found in the tenant")
		return
	}
	call := "azure:token"
	if authority != "" && authority != "login.microsoftonline.com" {
		call += "@" + authority
	}
	c.mu.Lock()
	grant, known := c.azureIDs[tenant+"/"+f.Get("client_id")]
	secret, hasSecret := c.azureSecret[tenant+"/"+f.Get("client_id")]
	c.mu.Unlock()
	var ok bool
	if s := f.Get("client_secret"); s != "" {
		ok = hasSecret && s == secret
	} else {
		var subject string
		subject, ok = c.review(r.Context(), f.Get("client_assertion"), "api://AzureADTokenExchange")
		ok = ok && grant.subject == subject
	}
	if !ok || !known || !c.record(call) {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "AADSTS700213: No matching federated identity record found for presented assertion subject")
		return
	}
	token := "aad-" + randomHex(16)
	c.mu.Lock()
	c.azureTokens[token] = azureIssued{who: tenant + "/" + f.Get("client_id"), resource: resource}
	c.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
}

// serveACRExchange trades an Entra ID token for the registry's password at registry host,
// which takes only tokens for its own cloud's resource.
func (c *Clouds) serveACRExchange(w http.ResponseWriter, r *http.Request, host string) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return
	}
	c.mu.Lock()
	issued, ok := c.azureTokens[r.PostForm.Get("access_token")]
	pull := issued.who == "msi" || c.azureIDs[issued.who].pull
	c.mu.Unlock()
	if !ok || r.PostForm.Get("service") != host || r.PostForm.Get("grant_type") != "access_token" {
		oauthError(w, http.StatusUnauthorized, "unauthorized", "the access token is not valid")
		return
	}
	if issued.resource != acrResources[host] {
		oauthError(w, http.StatusUnauthorized, "unauthorized", "the access token's audience is not valid for this registry")
		return
	}
	call := "azure:exchange"
	if host != ACRHost {
		call += "@" + host
	}
	if !pull || !c.record(call) {
		oauthError(w, http.StatusForbidden, "forbidden", "the identity has no role on the registry")
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"refresh_token": c.passwords[host]})
}

func (c *Clouds) serveGoogleSTS(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return
	}
	audience := r.PostForm.Get("audience")
	var tokenAudience string
	switch {
	case strings.HasPrefix(audience, "//iam.googleapis.com/projects/"):
		tokenAudience = "https:" + audience
	case strings.HasPrefix(audience, "identitynamespace:"+GCPProject+".svc.id.goog:"):
		tokenAudience = GCPProject + ".svc.id.goog"
	default:
		oauthError(w, http.StatusBadRequest, "invalid_request", "Invalid value for audience")
		return
	}
	subject, ok := c.review(r.Context(), r.PostForm.Get("subject_token"), tokenAudience)
	if !ok || !c.record("gcp:sts") {
		oauthError(w, http.StatusBadRequest, "invalid_grant", "The audience in ID Token does not match the expected audience.")
		return
	}
	token := "fed-" + randomHex(16)
	c.mu.Lock()
	c.gcpFed[token] = subject
	c.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer", "expires_in": 3600})
}

var impersonatePath = regexp.MustCompile(`^/v1/projects/-/serviceAccounts/([^/:]+):generateAccessToken$`)

func (c *Clouds) serveImpersonation(w http.ResponseWriter, r *http.Request) {
	m := impersonatePath.FindStringSubmatch(r.URL.Path)
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	c.mu.Lock()
	subject, known := c.gcpFed[token]
	allowed := m != nil && known && c.gcpAccounts[m[1]] == subject
	c.mu.Unlock()
	if !allowed || !c.record("gcp:impersonate") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"error":{"code":403,"message":"Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).","status":"PERMISSION_DENIED"}}`)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"accessToken": c.gcpToken, "expireTime": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
