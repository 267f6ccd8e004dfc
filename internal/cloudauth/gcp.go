package cloudauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/compute/metadata"
	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"golang.org/x/oauth2/google/externalaccount"
)

// Google Cloud ServiceAccount annotations: the Google service account to impersonate (as GKE's
// workload identity), and the workload identity provider outside GKE (as Flux's).
const (
	GCPServiceAccountAnnotation   = "iam.gke.io/gcp-service-account"
	GCPWorkloadProviderAnnotation = "gcp.auth.fluxcd.io/workload-identity-provider"
)

// Google endpoints of the token exchange and of impersonation.
const (
	gcpSTSURL         = "https://sts.googleapis.com/v1/token"
	gcpImpersonateURL = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/%s:generateAccessToken"
	gcpScope          = "https://www.googleapis.com/auth/cloud-platform"
	gcpUser           = "oauth2accesstoken"
)

var gcpCloud = &cloud{
	name:        "gcp",
	annotations: []string{GCPServiceAccountAnnotation, GCPWorkloadProviderAnnotation},
	registry: func(host string) (registry, error) {
		h := strings.ToLower(host)
		if h == "gcr.io" || strings.HasSuffix(h, ".gcr.io") || strings.HasSuffix(h, "-docker.pkg.dev") {
			return registry{host: h}, nil
		}
		return registry{}, fmt.Errorf("spec.provider gcp: %s is not an Artifact Registry (<location>-docker.pkg.dev) or Container Registry (gcr.io, <region>.gcr.io) host: fix spec.image or set spec.provider to generic", host)
	},
	login: gcpLogin,
}

// gcpLogin gets an access token with the cloud-platform scope, which the registries accept as
// the password of oauth2accesstoken.
func gcpLogin(ctx context.Context, a *Authenticator, id *identity, reg registry) (authn.AuthConfig, time.Time, error) {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, a.client)
	var (
		ts  oauth2.TokenSource
		err error
	)
	if id.account != nil {
		ts, err = gcpObjectTokenSource(ctx, id)
	} else {
		var creds *google.Credentials
		creds, err = google.FindDefaultCredentials(ctx, gcpScope)
		if err != nil {
			return authn.AuthConfig{}, time.Time{}, failed("gcp: no application default credentials in the scan function's environment (%v): enable GKE workload identity for its ServiceAccount, or set spec.serviceAccountName with object-level workload identity", err)
		}
		ts = creds.TokenSource
	}
	if err != nil {
		return authn.AuthConfig{}, time.Time{}, err
	}
	tok, err := ts.Token()
	if err != nil {
		return authn.AuthConfig{}, time.Time{}, failed("gcp: getting an access token as %s for %s failed: %s", id.describe(), reg.host, gcpProblem(id, err))
	}
	return authn.AuthConfig{Username: gcpUser, Password: tok.AccessToken}, tok.Expiry, nil
}

// gcpObjectTokenSource exchanges a token of the ServiceAccount at Google's STS, through the
// workload identity provider of the annotation, or GKE's workload identity pool of this
// cluster without one, and impersonates the Google service account of the other annotation if
// it is set.
func gcpObjectTokenSource(ctx context.Context, id *identity) (oauth2.TokenSource, error) {
	var stsAudience, tokenAudience string
	if wip := strings.TrimSpace(id.account.Annotations[GCPWorkloadProviderAnnotation]); wip != "" {
		wip = strings.TrimPrefix(strings.TrimPrefix(wip, "//iam.googleapis.com/"), "https://iam.googleapis.com/")
		if !strings.HasPrefix(wip, "projects/") || !strings.Contains(wip, "/workloadIdentityPools/") || !strings.Contains(wip, "/providers/") {
			return nil, failed("%s: annotation %s must be projects/<number>/locations/global/workloadIdentityPools/<pool>/providers/<provider>", id.describe(), GCPWorkloadProviderAnnotation)
		}
		stsAudience, tokenAudience = "//iam.googleapis.com/"+wip, "https://iam.googleapis.com/"+wip
	} else {
		project, err := metadata.ProjectIDWithContext(ctx)
		if err != nil {
			return nil, failed("%s has no annotation %s and the GKE metadata server did not give the project (%v): outside GKE, annotate the serviceaccount with its workload identity provider", id.describe(), GCPWorkloadProviderAnnotation, err)
		}
		location, err := metadata.InstanceAttributeValueWithContext(ctx, "cluster-location")
		if err != nil {
			return nil, failed("%s: reading the cluster location from the GKE metadata server: %v", id.describe(), err)
		}
		cluster, err := metadata.InstanceAttributeValueWithContext(ctx, "cluster-name")
		if err != nil {
			return nil, failed("%s: reading the cluster name from the GKE metadata server: %v", id.describe(), err)
		}
		pool := project + ".svc.id.goog"
		stsAudience = fmt.Sprintf("identitynamespace:%s:https://container.googleapis.com/v1/projects/%s/locations/%s/clusters/%s", pool, project, location, cluster)
		tokenAudience = pool
	}
	token, err := id.token(ctx, tokenAudience)
	if err != nil {
		return nil, err
	}
	cfg := externalaccount.Config{
		Audience:             stsAudience,
		SubjectTokenType:     "urn:ietf:params:oauth:token-type:jwt",
		TokenURL:             gcpSTSURL,
		Scopes:               []string{gcpScope},
		SubjectTokenSupplier: subjectToken(token),
	}
	if gsa := strings.TrimSpace(id.account.Annotations[GCPServiceAccountAnnotation]); gsa != "" {
		cfg.ServiceAccountImpersonationURL = fmt.Sprintf(gcpImpersonateURL, gsa)
	}
	ts, err := externalaccount.NewTokenSource(ctx, cfg)
	if err != nil {
		return nil, failed("gcp: %s: %v", id.describe(), err)
	}
	return ts, nil
}

// gcpProblem explains a failed token request without quoting tokens: oauth2's errors carry the
// service's answer, which holds an error code and description only.
func gcpProblem(id *identity, err error) string {
	msg := err.Error()
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg = strings.TrimSpace(re.ErrorCode + " " + re.ErrorDescription)
		if msg == "" {
			msg = re.Response.Status
		}
	}
	if id.account == nil {
		return msg
	}
	switch {
	case strings.Contains(msg, "AccessToken") || strings.Contains(msg, "impersonat"):
		return msg + fmt.Sprintf(": check the annotation %s and that the workload identity may impersonate it (roles/iam.workloadIdentityUser)", GCPServiceAccountAnnotation)
	default:
		return msg + fmt.Sprintf(": check the annotation %s and that the provider trusts this cluster's issuer for system:serviceaccount:%s:%s", GCPWorkloadProviderAnnotation, id.account.Namespace, id.account.Name)
	}
}

// subjectToken hands a ServiceAccount token to Google's token exchange.
type subjectToken string

func (t subjectToken) SubjectToken(context.Context, externalaccount.SupplierOptions) (string, error) {
	return string(t), nil
}
