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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Real host names of the cloud registries that Clouds serves.
const (
	ECRHost = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
	// ECRPublicHost leads to the same registry as ECRHost, with the same credentials.
	ECRPublicHost = "public.ecr.aws"
	ACRHost       = "x.azurecr.io"
	GARHost       = "us-docker.pkg.dev"
)

// Facts of the fake GKE metadata server.
const (
	GCPProject  = "reflector-test"
	GCPLocation = "us-central1"
	GCPCluster  = "reflector"
)

// Clouds fakes, on loopback, the cloud services that logins to ECR, ACR and Artifact Registry
// go through: AWS STS and ECR, Entra ID and managed identity, Google's STS, IAM credentials and
// metadata server. Each checks what the real one would: ServiceAccount tokens are reviewed by
// the apiserver for the cloud's audience, and only identities granted with the Allow methods
// get credentials. It also serves a registry under each cloud's real host name (ECRHost,
// ACRHost, GARHost) that wants the credentials its cloud issues, reached with Transport through
// a proxy that routes those names, and the Google API names, to loopback with a test CA.
type Clouds struct {
	// ECR, ACR and GAR are the registries behind ECRHost, ACRHost and GARHost.
	ECR, ACR, GAR *Registry

	kube  kubernetes.Interface
	ca    *registryCA
	front *httptest.Server
	plain *httptest.Server
	proxy *RegistryProxy

	ecrPassword, acrPassword, gcpToken, identityHeader string

	mu          sync.Mutex
	calls       []string
	awsRoles    map[string]string
	awsKeys     map[string]bool
	azureIDs    map[string]azureGrant
	azureTokens map[string]string
	azureSecret map[string]string
	gcpAccounts map[string]string
	gcpFed      map[string]string
	deny        map[string]bool
}

type azureGrant struct {
	subject string
	pull    bool
}

// NewClouds starts the fakes and registries for the test; kube reviews ServiceAccount tokens
// (nil: set it later with ReviewWith, before any login).
func NewClouds(t testing.TB, kube kubernetes.Interface) *Clouds {
	t.Helper()
	c := &Clouds{
		kube:           kube,
		ecrPassword:    randomHex(16),
		acrPassword:    randomHex(16),
		gcpToken:       "ya29." + randomHex(16),
		identityHeader: randomHex(8),
		awsRoles:       map[string]string{},
		awsKeys:        map[string]bool{},
		azureIDs:       map[string]azureGrant{},
		azureTokens:    map[string]string{},
		azureSecret:    map[string]string{},
		gcpAccounts:    map[string]string{},
		gcpFed:         map[string]string{},
		deny:           map[string]bool{},
	}
	c.ECR = NewRegistry(t, RegistryBasicAuth("AWS", c.ecrPassword))
	c.ACR = NewRegistry(t, RegistryBasicAuth("00000000-0000-0000-0000-000000000000", c.acrPassword))
	c.GAR = NewRegistry(t, RegistryBasicAuth("oauth2accesstoken", c.gcpToken))
	ca, err := newRegistryCA()
	if err != nil {
		t.Fatal(err)
	}
	c.ca = ca
	names := []string{ECRHost, ECRPublicHost, ACRHost, GARHost, "sts.googleapis.com", "iamcredentials.googleapis.com"}
	cert, err := ca.issue("clouds", names, false)
	if err != nil {
		t.Fatal(err)
	}
	c.front = httptest.NewUnstartedServer(http.HandlerFunc(c.serveFront))
	c.front.TLS = &tls.Config{Certificates: []tls.Certificate{cert.pair}, MinVersion: tls.VersionTLS12}
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

// ReviewWith sets the apiserver that reviews ServiceAccount tokens, for fakes started before it.
func (c *Clouds) ReviewWith(kube kubernetes.Interface) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kube = kube
}

// ProcessEnv returns what a reflector process started by the test needs, besides Setenv's
// variables, to reach the registries and Google's APIs as Transport does: HTTPS_PROXY naming
// the routing proxy (loopback addresses bypass it) and SSL_CERT_FILE holding the test CA.
func (c *Clouds) ProcessEnv(t testing.TB) []string {
	path := filepath.Join(t.TempDir(), "clouds-ca.pem")
	if err := os.WriteFile(path, c.ca.certPEM, 0o600); err != nil {
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
		TLSClientConfig:     &tls.Config{RootCAs: c.ca.pool(), MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 10,
	}
}

// Setenv points every SDK at the fakes and away from the machine's own settings and metadata
// services, for the rest of the test: AWS service endpoints, no EC2 metadata and no shared
// config files; the Entra ID authority; the GCE metadata host and no gcloud configuration.
// The controller's own identity is left unset; tests set it as they need.
func (c *Clouds) Setenv(t testing.TB) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_STS":               c.plain.URL,
		"AWS_ENDPOINT_URL_ECR":               c.plain.URL,
		"AWS_ENDPOINT_URL_ECR_PUBLIC":        c.plain.URL,
		"AWS_EC2_METADATA_DISABLED":          "true",
		"AWS_CONFIG_FILE":                    filepath.Join(dir, "aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE":        filepath.Join(dir, "aws-credentials"),
		"AWS_ACCESS_KEY_ID":                  "",
		"AWS_SECRET_ACCESS_KEY":              "",
		"AWS_SESSION_TOKEN":                  "",
		"AWS_ROLE_ARN":                       "",
		"AWS_WEB_IDENTITY_TOKEN_FILE":        "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
		"AWS_PROFILE":                        "",
		"AWS_REGION":                         "",
		"AWS_CA_BUNDLE":                      "",
		"AZURE_AUTHORITY_HOST":               c.front.URL + "/",
		"AZURE_FEDERATED_TOKEN_FILE":         "",
		"AZURE_CLIENT_ID":                    "",
		"AZURE_TENANT_ID":                    "",
		"AZURE_CLIENT_SECRET":                "",
		"IDENTITY_ENDPOINT":                  c.plain.URL + "/msi/token",
		"IDENTITY_HEADER":                    c.identityHeader,
		"GCE_METADATA_HOST":                  c.plain.Listener.Addr().String(),
		"GOOGLE_APPLICATION_CREDENTIALS":     "",
		"CLOUDSDK_CONFIG":                    filepath.Join(dir, "gcloud"),
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

// Calls returns the calls the fakes answered with credentials, in order: aws:sts, aws:ecr,
// aws:ecr-public, azure:token, azure:msi, azure:exchange, gcp:sts, gcp:impersonate,
// gcp:metadata.
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
	s := []string{c.ecrPassword, c.acrPassword, c.gcpToken}
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
	tr, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil || !tr.Status.Authenticated {
		return "", false
	}
	return tr.Status.User.Username, true
}

// servePlain answers the plain-HTTP endpoints: AWS STS and ECR (told apart by X-Amz-Target),
// managed identity, and the GCE metadata server.
func (c *Clouds) servePlain(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/computeMetadata/v1/"):
		c.serveMetadata(w, r)
	case r.URL.Path == "/msi/token":
		c.serveManagedIdentity(w, r)
	case strings.HasPrefix(r.Header.Get("X-Amz-Target"), "AmazonEC2ContainerRegistry_V20150921."):
		c.serveECR(w, r, "aws:ecr", ECRHost)
	case strings.HasPrefix(r.Header.Get("X-Amz-Target"), "SpencerFrontendService."):
		c.serveECR(w, r, "aws:ecr-public", "public.ecr.aws")
	default:
		c.serveSTS(w, r)
	}
}

func (c *Clouds) serveSTS(w http.ResponseWriter, r *http.Request) {
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
	if !allowed || !c.record("aws:sts") {
		awsQueryError(w, http.StatusForbidden, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
		return
	}
	key := "ASIA" + strings.ToUpper(randomHex(8))
	c.mu.Lock()
	c.awsKeys[key] = true
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>
<Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>
<SubjectFromWebIdentityToken>%s</SubjectFromWebIdentityToken><AssumedRoleUser><Arn>%s</Arn><AssumedRoleId>AROA:%s</AssumedRoleId></AssumedRoleUser>
</AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleWithWebIdentityResponse>`,
		key, randomHex(20), randomHex(20), time.Now().Add(time.Hour).UTC().Format(time.RFC3339), xmlText(subject), xmlText(role), xmlText(subject))
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

var sigV4Key = regexp.MustCompile(`Credential=([A-Z0-9]+)/`)

// serveECR issues the registry password to callers that signed with credentials from the STS
// fake.
func (c *Clouds) serveECR(w http.ResponseWriter, r *http.Request, call, host string) {
	m := sigV4Key.FindStringSubmatch(r.Header.Get("Authorization"))
	c.mu.Lock()
	known := m != nil && c.awsKeys[m[1]]
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if !known {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"UnrecognizedClientException","message":"The security token included in the request is invalid."}`)
		return
	}
	if !c.record(call) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"AccessDeniedException","message":"not authorized to perform: ecr:GetAuthorizationToken"}`)
		return
	}
	token := base64.StdEncoding.EncodeToString([]byte("AWS:" + c.ecrPassword))
	expires := float64(time.Now().Add(12 * time.Hour).Unix())
	if call == "aws:ecr-public" {
		_ = json.NewEncoder(w).Encode(map[string]any{"authorizationData": map[string]any{"authorizationToken": token, "expiresAt": expires}})
		return
	}
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
	c.azureTokens[token] = "msi"
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

// serveFront answers the TLS names: the registries, Google's STS and IAM credentials, and on
// the loopback address the Entra ID authority and Google's STS again (for token_url).
func (c *Clouds) serveFront(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	switch {
	case host == ECRHost, host == ECRPublicHost:
		forward(w, r, c.ECR)
	case host == ACRHost && r.URL.Path == "/oauth2/exchange":
		c.serveACRExchange(w, r)
	case host == ACRHost:
		forward(w, r, c.ACR)
	case host == GARHost:
		forward(w, r, c.GAR)
	case r.URL.Path == "/v1/token":
		c.serveGoogleSTS(w, r)
	case strings.HasSuffix(r.URL.Path, ":generateAccessToken"):
		c.serveImpersonation(w, r)
	case strings.HasSuffix(r.URL.Path, "/oauth2/v2.0/token"):
		c.serveEntraToken(w, r)
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

func (c *Clouds) serveEntraToken(w http.ResponseWriter, r *http.Request) {
	tenant := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/oauth2/v2.0/token")
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return
	}
	f := r.PostForm
	if f.Get("scope") != "https://management.azure.com/.default" {
		oauthError(w, http.StatusBadRequest, "invalid_scope", "AADSTS70011: unexpected scope")
		return
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
	if !ok || !known || !c.record("azure:token") {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "AADSTS700213: No matching federated identity record found for presented assertion subject")
		return
	}
	token := "aad-" + randomHex(16)
	c.mu.Lock()
	c.azureTokens[token] = tenant + "/" + f.Get("client_id")
	c.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
}

func (c *Clouds) serveACRExchange(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return
	}
	c.mu.Lock()
	who, ok := c.azureTokens[r.PostForm.Get("access_token")]
	pull := who == "msi" || c.azureIDs[who].pull
	c.mu.Unlock()
	if !ok || r.PostForm.Get("service") != ACRHost || r.PostForm.Get("grant_type") != "access_token" {
		oauthError(w, http.StatusUnauthorized, "unauthorized", "the access token is not valid")
		return
	}
	if !pull || !c.record("azure:exchange") {
		oauthError(w, http.StatusForbidden, "forbidden", "the identity has no role on the registry")
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"refresh_token": c.acrPassword})
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
