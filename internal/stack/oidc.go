package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The stack proves every sender as knative/ does with Knative Eventing's authentication-oidc:
// each function accepts only a ServiceAccount token of OIDCNamespace for its own audience, and
// each process that sends to one presents such a token, issued by the apiserver's
// TokenRequest. knative/ runs the scan function's two surfaces as two Services, reflector-webhook
// and reflector-scan, each with its own audience; the stack's one scan process serves both and
// requires ScanAudience on both, its public surface's /broker included.
const (
	// OIDCNamespace is where the senders' ServiceAccounts live, as reflector-system in
	// knative/.
	OIDCNamespace = "reflector-system"
	// ScanAudience and PolicyAudience are the functions' audiences, those that knative/'s
	// Triggers name.
	ScanAudience   = "reflector-scan"
	PolicyAudience = "reflector-policy"
	// BrokerAccount stands for the Broker, which presents its Triggers' tokens in a cluster:
	// SenderToken issues its tokens.
	BrokerAccount = "broker"
	// SourceOIDCAccount is the OIDC identity that Knative's ApiServerSource controller creates
	// for the ApiServerSource reflector-objects of knative/eventing.yaml
	// (auth.GetOIDCServiceAccountNameForResource: <name>-oidc-<group>-<kind>) and names to the
	// receive adapter in K_OIDC_SERVICE_ACCOUNT.
	SourceOIDCAccount = "reflector-objects-oidc-sources.knative.dev-apiserversource"
)

// tokenLifetime is how long the tokens in the stack's token files live; they are renewed at
// half of it, as the kubelet renews a projected token well before it expires.
const tokenLifetime = time.Hour

// tokenFile is a token the stack keeps in a file for a process that sends: a token of
// ServiceAccount account for audience, as a projected serviceAccountToken volume (or the
// SinkBinding's /oidc/token) holds it in a cluster.
type tokenFile struct {
	name, account, audience string
}

// tokenFiles are the stack's token files: the scan function's K_SINK is the policy function,
// where knative/ has the Broker; the cron reconciler sends to both functions directly.
var tokenFiles = []tokenFile{
	{"scan-sink", "reflector-scan", PolicyAudience},
	{"cron-scan", "reflector-cron", ScanAudience},
	{"cron-policy", "reflector-cron", PolicyAudience},
}

// tokenPath returns the path of the token file name.
func (s *Stack) tokenPath(name string) string {
	return filepath.Join(s.opts.Dir, "tokens", name)
}

// senderIdentities creates OIDCNamespace and the senders' ServiceAccounts, writes the token
// files and renews them until Stop.
func (s *Stack) senderIdentities(ctx context.Context) error {
	if _, err := s.Kube.Namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OIDCNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, name := range []string{"reflector-scan", "reflector-cron", SourceOIDCAccount, BrokerAccount} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: OIDCNamespace, Name: name}}
		if _, err := s.Kube.ServiceAccounts.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(s.opts.Dir, "tokens"), 0o700); err != nil {
		return err
	}
	if err := s.writeTokens(ctx); err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-s.done:
				return
			case <-time.After(tokenLifetime / 2):
			}
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := s.writeTokens(rctx); err != nil {
				fmt.Fprintln(os.Stderr, "stack: renewing the senders' tokens:", err)
			}
			cancel()
		}
	}()
	return nil
}

// writeTokens writes a new token into each token file, replacing the file at once so that a
// reader never sees half a token.
func (s *Stack) writeTokens(ctx context.Context) error {
	for _, f := range tokenFiles {
		token, err := s.token(ctx, f.account, f.audience)
		if err != nil {
			return err
		}
		tmp := s.tokenPath(f.name) + ".new"
		if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, s.tokenPath(f.name)); err != nil {
			return err
		}
	}
	return nil
}

// token returns a token of ServiceAccount OIDCNamespace/account for audiences.
func (s *Stack) token(ctx context.Context, account string, audiences ...string) (string, error) {
	seconds := int64(tokenLifetime.Seconds())
	tr, err := s.Kube.ServiceAccounts.CreateToken(ctx, OIDCNamespace, account, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &seconds},
	})
	if err != nil {
		return "", fmt.Errorf("a token of %s/%s for %v: %w", OIDCNamespace, account, audiences, err)
	}
	return tr.Status.Token, nil
}

// SenderToken returns a token that the functions accept for audiences, as the Broker presents
// one: of ServiceAccount BrokerAccount of OIDCNamespace. A test sends CloudEvents to the
// functions' cluster-local listeners with it, as a Trigger would.
func (s *Stack) SenderToken(ctx context.Context, audiences ...string) (string, error) {
	return s.token(ctx, BrokerAccount, audiences...)
}

// senderProof returns the environment of component c for sender proof: the functions require
// tokens of OIDCNamespace for their audience and present theirs to their sink; Knative's
// adapters ask the apiserver for their OIDC identity's token for their sink's audience, as the
// ApiServerSource controller configures them (K_AUDIENCE, K_OIDC_SERVICE_ACCOUNT). The cron
// reconciler's token files are flags (command).
func (s *Stack) senderProof(c string) []string {
	require := func(audience string) []string {
		return []string{"REFLECTOR_OIDC_AUDIENCE=" + audience, "REFLECTOR_OIDC_NAMESPACES=" + OIDCNamespace}
	}
	switch c {
	case Scan:
		return append(require(ScanAudience), "K_SINK_TOKEN_FILE="+s.tokenPath("scan-sink"))
	case Policy:
		return require(PolicyAudience)
	case SourceScan:
		return []string{"K_AUDIENCE=" + ScanAudience, "K_OIDC_SERVICE_ACCOUNT=" + SourceOIDCAccount}
	case SourcePolicy:
		return []string{"K_AUDIENCE=" + PolicyAudience, "K_OIDC_SERVICE_ACCOUNT=" + SourceOIDCAccount}
	}
	return nil
}
