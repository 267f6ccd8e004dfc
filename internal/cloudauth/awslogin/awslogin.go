// Package awslogin asks ECR and ECR Public for registry tokens with the AWS SDK, for
// internal/cloudauth's logins of ImageRepositories with spec.provider aws. Importing it
// registers it (cloudauth.RegisterAWS): the scan and policy functions do, so that the SDK, its
// initialisers (some 1.3 MB of allocations at every start) and its code are linked only into
// the programs that log in to registries, not into the cron reconciler, which links cloudauth
// through internal/reconcile but never logs in.
package awslogin

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	"github.com/aws/aws-sdk-go-v2/service/ecrpublic"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/imagereflector/reflector/internal/cloudauth"
)

func init() { cloudauth.RegisterAWS(Token) }

// Token asks ECR (or ECR Public) for an authorization token as q says.
func Token(ctx context.Context, q cloudauth.AWSTokenRequest) (cloudauth.AWSToken, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(q.Region)}
	if q.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(q.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cloudauth.AWSToken{}, &cloudauth.AWSError{Err: err, Config: true}
	}
	if q.Role != "" {
		provider := stscreds.NewWebIdentityRoleProvider(sts.NewFromConfig(cfg), q.Role, staticToken(q.WebIdentityToken),
			func(o *stscreds.WebIdentityRoleOptions) { o.RoleSessionName = q.SessionName })
		cfg.Credentials = aws.NewCredentialsCache(provider)
	}
	var t cloudauth.AWSToken
	if q.Public {
		out, err := ecrpublic.NewFromConfig(cfg).GetAuthorizationToken(ctx, &ecrpublic.GetAuthorizationTokenInput{})
		if err != nil {
			return t, callError(err)
		}
		if out.AuthorizationData != nil {
			t = cloudauth.AWSToken{Encoded: aws.ToString(out.AuthorizationData.AuthorizationToken), Expires: aws.ToTime(out.AuthorizationData.ExpiresAt)}
		}
		return t, nil
	}
	out, err := ecr.NewFromConfig(cfg).GetAuthorizationToken(ctx, &ecr.GetAuthorizationTokenInput{})
	if err != nil {
		return t, callError(err)
	}
	if len(out.AuthorizationData) > 0 {
		t = cloudauth.AWSToken{Encoded: aws.ToString(out.AuthorizationData[0].AuthorizationToken), Expires: aws.ToTime(out.AuthorizationData[0].ExpiresAt)}
	}
	return t, nil
}

// callError is a failed call, with the code and message of AWS's error answer when it gave one.
func callError(err error) error {
	e := &cloudauth.AWSError{Err: err}
	var api smithy.APIError
	if errors.As(err, &api) {
		e.API, e.Code, e.Message = true, api.ErrorCode(), api.ErrorMessage()
	}
	return e
}

// staticToken hands a ServiceAccount token to the STS web identity provider.
type staticToken string

func (t staticToken) GetIdentityToken() ([]byte, error) { return []byte(t), nil }
