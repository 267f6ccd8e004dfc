package cloudauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// Azure ServiceAccount annotations and token audience, as AKS's workload identity.
const (
	AzureClientIDAnnotation = "azure.workload.identity/client-id"
	AzureTenantIDAnnotation = "azure.workload.identity/tenant-id"
	AzureAudience           = "api://AzureADTokenExchange"
)

// acrUser is the user name that goes with an ACR refresh token.
const acrUser = "00000000-0000-0000-0000-000000000000"

// azureEnvironment is one Azure cloud: its name, where its Entra ID signs in, and the resource
// whose tokens ACR exchanges.
type azureEnvironment struct {
	name, authority, resource string
}

// acrClouds maps the domain of an ACR registry to its cloud: public, China, US Government.
var acrClouds = map[string]azureEnvironment{
	".azurecr.io": {"Azure's public cloud", "https://login.microsoftonline.com/", "https://management.azure.com/"},
	".azurecr.cn": {"Azure China", "https://login.chinacloudapi.cn/", "https://management.chinacloudapi.cn/"},
	".azurecr.us": {"Azure US Government", "https://login.microsoftonline.us/", "https://management.usgovcloudapi.net/"},
}

// azureOtherCloud explains, for an Entra ID refusal, that AZURE_AUTHORITY_HOST (as AKS's workload
// identity webhook sets it) is the authority of another cloud than the registry's: no identity
// of one cloud signs in to another's registries. It returns "" when that is not so.
func azureOtherCloud(authority, host string, env azureEnvironment) string {
	norm := func(u string) string { return strings.TrimSuffix(strings.ToLower(u), "/") }
	for _, other := range acrClouds {
		if norm(authority) == norm(other.authority) && other.authority != env.authority {
			return fmt.Sprintf("AZURE_AUTHORITY_HOST %s is the authority of %s, but %s is a registry of %s, whose authority is %s: sign in with an identity of that cloud, with AZURE_AUTHORITY_HOST set to its authority",
				authority, other.name, host, env.name, env.authority)
		}
	}
	return ""
}

var azureCloud = &cloud{
	name:        "azure",
	annotations: []string{AzureTenantIDAnnotation, AzureClientIDAnnotation},
	registry: func(host string) (registry, error) {
		h := strings.ToLower(host)
		for suffix := range acrClouds {
			if name, ok := strings.CutSuffix(h, suffix); ok && name != "" && !strings.Contains(name, "/") {
				return registry{host: h, region: suffix}, nil
			}
		}
		return registry{}, fmt.Errorf("spec.provider azure: %s is not an Azure Container Registry (<name>.azurecr.io, .azurecr.cn or .azurecr.us): fix spec.image or set spec.provider to generic", host)
	},
	login: azureLogin,
}

// azureToken is an Entra ID access token.
type azureToken struct {
	value   string
	expires time.Time
	tenant  string
}

// azureLogin gets an Entra ID token for the identity and exchanges it at the registry for a
// refresh token, which the registry accepts as a password.
func azureLogin(ctx context.Context, a *Authenticator, id *identity, reg registry) (authn.AuthConfig, time.Time, error) {
	env := acrClouds[reg.region]
	otherCloud := ""
	if h := os.Getenv("AZURE_AUTHORITY_HOST"); h != "" {
		otherCloud = azureOtherCloud(h, reg.host, env)
		env.authority = h
	}
	scope := env.resource + ".default"
	var (
		tok azureToken
		err error
	)
	if id.account != nil {
		tok, err = azureObjectToken(ctx, a, id, env, scope)
	} else {
		tok, err = azureControllerToken(ctx, a, env, scope)
	}
	if err != nil && otherCloud != "" {
		return authn.AuthConfig{}, time.Time{}, failed("%v; %s", err, otherCloud)
	}
	if err != nil {
		return authn.AuthConfig{}, time.Time{}, err
	}
	refresh, err := acrExchange(ctx, a, reg.host, tok)
	if err != nil {
		return authn.AuthConfig{}, time.Time{}, err
	}
	expires := tok.expires
	if exp, ok := jwtExpiry(refresh); ok {
		expires = exp
	}
	return authn.AuthConfig{Username: acrUser, Password: refresh}, expires, nil
}

// azureObjectToken signs in as the managed identity or application that the ServiceAccount's
// annotations name, with a token of the ServiceAccount as client assertion.
func azureObjectToken(ctx context.Context, a *Authenticator, id *identity, env azureEnvironment, scope string) (azureToken, error) {
	tenant, err := id.annotation(AzureTenantIDAnnotation, "the Entra ID tenant of the identity")
	if err != nil {
		return azureToken{}, err
	}
	client, err := id.annotation(AzureClientIDAnnotation, "the client ID of the managed identity or application with AcrPull on the registry")
	if err != nil {
		return azureToken{}, err
	}
	assertion, err := id.token(ctx, AzureAudience)
	if err != nil {
		return azureToken{}, err
	}
	tok, err := azureClientCredentials(ctx, a, azureGrant{env.authority, tenant, client, scope, url.Values{
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion":      {assertion},
	}})
	if err != nil {
		return azureToken{}, failed("azure: Entra ID refused the federated credential of %s for client %s in tenant %s (%v): check that the identity has a federated credential for issuer of this cluster, subject system:serviceaccount:%s:%s and audience %s",
			id.describe(), client, tenant, err, id.account.Namespace, id.account.Name, AzureAudience)
	}
	return tok, nil
}

// azureControllerToken signs in as the scan function itself, as azidentity's default chain
// would: workload identity, a client secret, managed identity.
func azureControllerToken(ctx context.Context, a *Authenticator, env azureEnvironment, scope string) (azureToken, error) {
	tenant, client := os.Getenv("AZURE_TENANT_ID"), os.Getenv("AZURE_CLIENT_ID")
	if file := os.Getenv("AZURE_FEDERATED_TOKEN_FILE"); file != "" {
		assertion, err := os.ReadFile(file)
		if err != nil {
			return azureToken{}, failed("azure: reading AZURE_FEDERATED_TOKEN_FILE: %v", err)
		}
		if tenant == "" || client == "" {
			return azureToken{}, failed("azure: AZURE_FEDERATED_TOKEN_FILE is set but AZURE_TENANT_ID or AZURE_CLIENT_ID is not: label the scan function's pods azure.workload.identity/use=true and annotate its ServiceAccount with %s", AzureClientIDAnnotation)
		}
		tok, err := azureClientCredentials(ctx, a, azureGrant{env.authority, tenant, client, scope, url.Values{
			"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
			"client_assertion":      {strings.TrimSpace(string(assertion))},
		}})
		if err != nil {
			return azureToken{}, failed("azure: Entra ID refused the scan function's workload identity (client %s, tenant %s): %v", client, tenant, err)
		}
		return tok, nil
	}
	if secret := os.Getenv("AZURE_CLIENT_SECRET"); secret != "" && tenant != "" && client != "" {
		tok, err := azureClientCredentials(ctx, a, azureGrant{env.authority, tenant, client, scope, url.Values{"client_secret": {secret}}})
		if err != nil {
			return azureToken{}, failed("azure: Entra ID refused the client secret of client %s in tenant %s: %v", client, tenant, err)
		}
		return tok, nil
	}
	tok, err := azureManagedIdentity(ctx, a, env.resource, client)
	if err != nil {
		return azureToken{}, failed("azure: no usable identity in the scan function's environment (no AZURE_FEDERATED_TOKEN_FILE, no AZURE_CLIENT_SECRET, and managed identity failed: %v): enable workload identity for the scan function, or set spec.serviceAccountName with object-level workload identity", err)
	}
	return tok, nil
}

// azureGrant is one client credentials grant: the client of tenant at authority asks for scope,
// proving itself with credential (a client secret or a client assertion).
type azureGrant struct {
	authority, tenant, client, scope string
	credential                       url.Values
}

// azureClientCredentials runs the client credentials grant g at the tenant's token endpoint.
func azureClientCredentials(ctx context.Context, a *Authenticator, g azureGrant) (azureToken, error) {
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {g.client}, "scope": {g.scope}}
	for k, v := range g.credential {
		form[k] = v
	}
	tenant := g.tenant
	endpoint := strings.TrimSuffix(g.authority, "/") + "/" + url.PathEscape(tenant) + "/oauth2/v2.0/token"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return azureToken{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var body struct {
		AccessToken string          `json:"access_token"`
		ExpiresIn   json.RawMessage `json:"expires_in"`
	}
	if err := doJSON(a.client, req, &body); err != nil {
		return azureToken{}, err
	}
	secs, _ := strconv.Atoi(strings.Trim(string(body.ExpiresIn), `"`))
	return azureToken{value: body.AccessToken, expires: a.now().Add(time.Duration(secs) * time.Second), tenant: tenant}, nil
}

// azureManagedIdentity asks the managed identity endpoint for a token: the one named by
// IDENTITY_ENDPOINT and IDENTITY_HEADER where the platform sets them, else the instance
// metadata service.
func azureManagedIdentity(ctx context.Context, a *Authenticator, resource, client string) (azureToken, error) {
	q := url.Values{"resource": {resource}}
	if client != "" {
		q.Set("client_id", client)
	}
	var req *http.Request
	var err error
	if endpoint := os.Getenv("IDENTITY_ENDPOINT"); endpoint != "" {
		q.Set("api-version", "2019-08-01")
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"?"+q.Encode(), nil)
		if err != nil {
			return azureToken{}, err
		}
		req.Header.Set("X-IDENTITY-HEADER", os.Getenv("IDENTITY_HEADER"))
	} else {
		q.Set("api-version", "2018-02-01")
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, "http://169.254.169.254/metadata/identity/oauth2/token?"+q.Encode(), nil)
		if err != nil {
			return azureToken{}, err
		}
		req.Header.Set("Metadata", "true")
	}
	var body struct {
		AccessToken string          `json:"access_token"`
		ExpiresOn   json.RawMessage `json:"expires_on"`
	}
	if err := doJSON(a.client, req, &body); err != nil {
		return azureToken{}, err
	}
	secs, _ := strconv.ParseInt(strings.Trim(string(body.ExpiresOn), `"`), 10, 64)
	return azureToken{value: body.AccessToken, expires: time.Unix(secs, 0)}, nil
}

// acrExchange trades an Entra ID token for an ACR refresh token at the registry.
func acrExchange(ctx context.Context, a *Authenticator, host string, tok azureToken) (string, error) {
	form := url.Values{"grant_type": {"access_token"}, "service": {host}, "access_token": {tok.value}}
	if tok.tenant != "" {
		form.Set("tenant", tok.tenant)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+host+"/oauth2/exchange", strings.NewReader(form.Encode()))
	if err != nil {
		return "", failed("azure: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var body struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := doJSON(a.client, req, &body); err != nil {
		return "", failed("azure: %s refused to exchange the Entra ID token for a registry token (%v): check that the identity has the AcrPull role on the registry", host, err)
	}
	if body.RefreshToken == "" {
		return "", failed("azure: %s answered the token exchange without a refresh token", host)
	}
	return body.RefreshToken, nil
}

// doJSON sends req and decodes a 200 answer into out. Other answers become an error that quotes
// the service's OAuth error code and description, never the request.
func doJSON(c *http.Client, req *http.Request, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		// url.Error quotes the URL, which carries no credentials here; the query of the
		// managed identity endpoint names only the resource.
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var oe struct {
			Error       json.RawMessage `json:"error"`
			Description string          `json:"error_description"`
			Message     string          `json:"message"`
		}
		_ = json.Unmarshal(b, &oe)
		code := strings.Trim(string(oe.Error), `"`)
		detail := strings.TrimSpace(strings.Join([]string{code, oe.Description, oe.Message}, " "))
		if detail == "" {
			detail = "no error description"
		}
		return fmt.Errorf("%s %s: %s", resp.Status, req.URL.Host, truncate(detail, 300))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s answered with malformed JSON", req.URL.Host)
	}
	return nil
}

// jwtExpiry reads the exp claim of a JWT without verifying it: the issuer verifies its tokens,
// the expiry only decides when to ask again.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}
