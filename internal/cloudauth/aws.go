package cloudauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	"github.com/aws/aws-sdk-go-v2/service/ecrpublic"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
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

// awsLogin asks ECR (or ECR Public) for a registry token with the controller's credentials or
// those of the role that the ServiceAccount's annotation names.
func awsLogin(ctx context.Context, a *Authenticator, id *identity, reg registry) (authn.AuthConfig, time.Time, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(reg.region)}
	if a.customClient {
		opts = append(opts, config.WithHTTPClient(a.client))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return authn.AuthConfig{}, time.Time{}, failed("aws: reading the AWS configuration of the scan function: %v", err)
	}
	role := ""
	if id.account != nil {
		if role, err = id.annotation(AWSRoleARNAnnotation, "the ARN of the IAM role to assume (arn:aws:iam::<account>:role/<name>)"); err != nil {
			return authn.AuthConfig{}, time.Time{}, err
		}
		token, err := id.token(ctx, AWSAudience)
		if err != nil {
			return authn.AuthConfig{}, time.Time{}, err
		}
		session := "reflector-" + id.account.Namespace + "-" + id.account.Name
		provider := stscreds.NewWebIdentityRoleProvider(sts.NewFromConfig(cfg), role, staticToken(token),
			func(o *stscreds.WebIdentityRoleOptions) { o.RoleSessionName = truncate(session, 64) })
		cfg.Credentials = aws.NewCredentialsCache(provider)
	}
	var (
		encoded string
		expires time.Time
	)
	if reg.public {
		out, err := ecrpublic.NewFromConfig(cfg).GetAuthorizationToken(ctx, &ecrpublic.GetAuthorizationTokenInput{})
		if err != nil {
			return authn.AuthConfig{}, time.Time{}, awsFailure(id, role, "ECR Public", err)
		}
		if out.AuthorizationData != nil {
			encoded, expires = aws.ToString(out.AuthorizationData.AuthorizationToken), aws.ToTime(out.AuthorizationData.ExpiresAt)
		}
	} else {
		out, err := ecr.NewFromConfig(cfg).GetAuthorizationToken(ctx, &ecr.GetAuthorizationTokenInput{})
		if err != nil {
			return authn.AuthConfig{}, time.Time{}, awsFailure(id, role, "ECR", err)
		}
		if len(out.AuthorizationData) > 0 {
			encoded, expires = aws.ToString(out.AuthorizationData[0].AuthorizationToken), aws.ToTime(out.AuthorizationData[0].ExpiresAt)
		}
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	user, pass, ok := strings.Cut(string(raw), ":")
	if err != nil || !ok || pass == "" {
		return authn.AuthConfig{}, time.Time{}, failed("aws: the authorization token from %s is not base64 of user:password", reg.host)
	}
	return authn.AuthConfig{Username: user, Password: pass}, expires, nil
}

// awsFailure explains a failed GetAuthorizationToken: the role could not be assumed, the
// environment holds no credentials, or ECR refused them.
func awsFailure(id *identity, role, service string, err error) error {
	var api smithy.APIError
	detail := err.Error()
	if errors.As(err, &api) {
		detail = api.ErrorCode() + ": " + api.ErrorMessage()
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
func awsContainerFailure(err error, api smithy.APIError) error {
	const where = "aws: the container credentials endpoint in AWS_CONTAINER_CREDENTIALS_FULL_URI (EKS Pod Identity)"
	if _, cause, ok := strings.Cut(err.Error(), "resolve auth token: "); ok {
		return failed("%s: reading the token in AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE failed (%s): check that the scan function's pods were started with EKS Pod Identity (the pod identity webhook mounts the token and sets the variable)", where, cause)
	}
	if api == nil {
		return failed("%s did not answer (%v): check that the EKS Pod Identity Agent add-on runs on the scan function's nodes", where, redact.Error(err))
	}
	detail := api.ErrorMessage()
	if code := api.ErrorCode(); code != "" {
		detail = code + ": " + detail
	}
	if api.ErrorCode() == "ResourceNotFoundException" {
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

// staticToken hands a ServiceAccount token to the STS web identity provider.
type staticToken string

func (t staticToken) GetIdentityToken() ([]byte, error) { return []byte(t), nil }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
