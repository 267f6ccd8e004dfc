package cloudauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/imagereflector/reflector/internal/redact"
)

// AWS ServiceAccount annotation and token audience, as EKS's IAM roles for service accounts.
const (
	AWSRoleARNAnnotation = "eks.amazonaws.com/role-arn"
	AWSAudience          = "sts.amazonaws.com"
)

// awsPodIdentityAudience is the audience of the token EKS Pod Identity projects into pods.
const awsPodIdentityAudience = "pods.eks.amazonaws.com"

// ecrHost matches the hosts of ECR private registries in every partition:
// <account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn], and the dual-stack and isolated-region
// domains.
var ecrHost = regexp.MustCompile(`^([0-9]{12})\.dkr[.-]ecr(-fips)?\.([a-z0-9-]+)\.(amazonaws\.com(\.cn)?|on\.aws|on\.amazonwebservices\.com\.cn|sc2s\.sgov\.gov|c2s\.ic\.gov|cloud\.adc-e\.uk|csp\.hci\.ic\.gov)$`)

// ecrPublicHost is ECR Public, whose credentials are issued in us-east-1.
const ecrPublicHost = "public.ecr.aws"

var awsCloud = &cloud{
	name:        "aws",
	annotations: []string{AWSRoleARNAnnotation},
	registry: func(host string) (registry, error) {
		h := strings.ToLower(host)
		if h == ecrPublicHost {
			return registry{host: h, region: "us-east-1", public: true}, nil
		}
		m := ecrHost.FindStringSubmatch(h)
		if m == nil {
			return registry{}, fmt.Errorf("spec.provider aws: %s is not an ECR registry (<account>.dkr.ecr.<region>.amazonaws.com or public.ecr.aws): fix spec.image or set spec.provider to generic", host)
		}
		return registry{host: h, region: m[3]}, nil
	},
	login: awsLogin,
}

// AWSTokenRequest is what an AWS login asks ECR (or ECR Public) for: an authorization token
// in Region, with the credentials of the process's environment, or those of Role assumed with
// WebIdentityToken when Role is set.
type AWSTokenRequest struct {
	Region string
	// Public asks ECR Public instead of ECR.
	Public bool
	// HTTPClient, when set, is the client the SDK uses instead of its own, which honours
	// AWS_CA_BUNDLE.
	HTTPClient *http.Client
	// Role is the ARN of the IAM role to assume, WebIdentityToken the ServiceAccount token
	// that proves the right to, and SessionName names the role session.
	Role, WebIdentityToken, SessionName string
}

// AWSToken is ECR's answer: the base64 of user:password, and when it expires.
type AWSToken struct {
	Encoded string
	Expires time.Time
}

// AWSError is a failed AWS login: Config when the SDK could not load the configuration,
// else a failed call, with the code and message of AWS's error answer when API.
type AWSError struct {
	Err           error
	Config        bool
	API           bool
	Code, Message string
}

func (e *AWSError) Error() string { return e.Err.Error() }
func (e *AWSError) Unwrap() error { return e.Err }

// AWSTokenFunc asks ECR or ECR Public for a token; its errors are *AWSError.
type AWSTokenFunc func(ctx context.Context, q AWSTokenRequest) (AWSToken, error)

// awsToken is the AWSTokenFunc that RegisterAWS set: the AWS SDK is linked only into the
// programs that log in to ECR (internal/cloudauth/awslogin), not into every program that links
// this package, such as the cron reconciler, which never logs in to a registry.
var awsToken atomic.Pointer[AWSTokenFunc]

// RegisterAWS sets how AWS logins ask ECR for tokens; internal/cloudauth/awslogin calls it.
func RegisterAWS(f AWSTokenFunc) { awsToken.Store(&f) }

// awsLogin asks ECR (or ECR Public) for a registry token with the controller's credentials or
// those of the role that the ServiceAccount's annotation names.
func awsLogin(ctx context.Context, a *Authenticator, id *identity, reg registry) (authn.AuthConfig, time.Time, error) {
	token := awsToken.Load()
	if token == nil {
		return authn.AuthConfig{}, time.Time{}, failed("aws: this program was built without ECR logins (internal/cloudauth/awslogin)")
	}
	q := AWSTokenRequest{Region: reg.region, Public: reg.public}
	if a.customClient {
		q.HTTPClient = a.client
	}
	role := ""
	if id.account != nil {
		var err error
		if role, err = id.annotation(AWSRoleARNAnnotation, "the ARN of the IAM role to assume (arn:aws:iam::<account>:role/<name>)"); err != nil {
			return authn.AuthConfig{}, time.Time{}, err
		}
		if q.WebIdentityToken, err = id.token(ctx, AWSAudience); err != nil {
			return authn.AuthConfig{}, time.Time{}, err
		}
		q.Role, q.SessionName = role, truncate("reflector-"+id.account.Namespace+"-"+id.account.Name, 64)
	}
	t, err := (*token)(ctx, q)
	if err != nil {
		if ae, ok := errors.AsType[*AWSError](err); ok && ae.Config {
			return authn.AuthConfig{}, time.Time{}, failed("aws: reading the AWS configuration of the scan function: %v", ae.Err)
		}
		service := "ECR"
		if reg.public {
			service = "ECR Public"
		}
		return authn.AuthConfig{}, time.Time{}, awsFailure(id, role, service, err)
	}
	raw, err := base64.StdEncoding.DecodeString(t.Encoded)
	user, pass, ok := strings.Cut(string(raw), ":")
	if err != nil || !ok || pass == "" {
		return authn.AuthConfig{}, time.Time{}, failed("aws: the authorization token from %s is not base64 of user:password", reg.host)
	}
	return authn.AuthConfig{Username: user, Password: pass}, t.Expires, nil
}

// awsFailure explains a failed GetAuthorizationToken: the role could not be assumed, the
// environment holds no credentials, or ECR refused them.
func awsFailure(id *identity, role, service string, err error) error {
	api, _ := errors.AsType[*AWSError](err)
	if api != nil && !api.API {
		api = nil
	}
	detail := err.Error()
	if api != nil {
		detail = api.Code + ": " + api.Message
	}
	switch {
	case role != "" && strings.Contains(err.Error(), "AssumeRoleWithWebIdentity"):
		return failed("aws: STS refused AssumeRoleWithWebIdentity of role %s for %s (%s): check the role ARN in the annotation %s and that the role's trust policy allows system:serviceaccount:%s:%s with audience %s",
			role, id.describe(), detail, AWSRoleARNAnnotation, id.account.Namespace, id.account.Name, AWSAudience)
	case role == "" && strings.Contains(err.Error(), "failed to refresh cached credentials") && awsContainerCredentials():
		return awsContainerFailure(err, api)
	case role == "" && strings.Contains(err.Error(), "failed to refresh cached credentials"):
		return failed("aws: no usable credentials in the scan function's environment (%s): give its ServiceAccount an IAM role (IRSA or EKS Pod Identity), or set spec.serviceAccountName with object-level workload identity", detail)
	}
	return failed("aws: %s GetAuthorizationToken as %s failed: %s: check that the identity may call ecr:GetAuthorizationToken", service, awsWho(id, role), detail)
}

// awsContainerCredentials tells whether the SDK's default chain gets the scan function's
// credentials from a container credentials endpoint given by URL, as on EKS Pod Identity:
// no static keys or web identity token come before it.
func awsContainerCredentials() bool {
	return os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "" &&
		os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") == ""
}

// awsContainerFailure explains why the container credentials endpoint, on EKS the Pod Identity
// agent, gave the scan function no credentials: the token file could not be read, the agent
// refused the token or found no association, or it did not answer. api is the agent's error
// answer, if it gave one. The token itself is never quoted.
func awsContainerFailure(err error, api *AWSError) error {
	const where = "aws: the container credentials endpoint in AWS_CONTAINER_CREDENTIALS_FULL_URI (EKS Pod Identity)"
	if _, cause, ok := strings.Cut(err.Error(), "resolve auth token: "); ok {
		return failed("%s: reading the token in AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE failed (%s): check that the scan function's pods were started with EKS Pod Identity (the pod identity webhook mounts the token and sets the variable)", where, cause)
	}
	if api == nil {
		return failed("%s did not answer (%v): check that the EKS Pod Identity Agent add-on runs on the scan function's nodes", where, redact.Error(err))
	}
	detail := api.Message
	if code := api.Code; code != "" {
		detail = code + ": " + detail
	}
	if api.Code == "ResourceNotFoundException" {
		return failed("%s found no role for the scan function (%s): create a pod identity association for its namespace and ServiceAccount with a role that may call ecr:GetAuthorizationToken", where, detail)
	}
	return failed("%s refused the token in AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (%s): check that the file holds the pod's projected ServiceAccount token for audience %s and that a pod identity association exists for the scan function's namespace and ServiceAccount", where, detail, awsPodIdentityAudience)
}

func awsWho(id *identity, role string) string {
	if role == "" {
		return id.describe()
	}
	return "role " + role + " (" + id.describe() + ")"
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
