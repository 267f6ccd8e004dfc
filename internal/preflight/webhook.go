package preflight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/imagereflector/reflector/internal/redact"
)

// Prober asks url and returns an error unless it answered 200.
type Prober func(ctx context.Context, url string) error

// HTTPProber returns a Prober that GETs through client, bounded by timeout.
func HTTPProber(client *http.Client, timeout time.Duration) Prober {
	return func(ctx context.Context, u string) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("answered %s", resp.Status)
		}
		return nil
	}
}

// tlsFix makes Knative give Routes https URLs with certificates of cert-manager's, or https URLs
// where TLS ends in front of Knative.
const tlsFix = "# a domain of yours, and certificates from cert-manager (installed, with a ClusterIssuer):\n" +
	`kubectl patch configmap config-domain -n knative-serving --type merge -p '{"data":{"<your domain>":""}}'` + "\n" +
	`kubectl patch configmap config-certmanager -n knative-serving --type merge -p '{"data":{"issuerRef":"kind: ClusterIssuer\nname: <issuer>"}}'` + "\n" +
	`kubectl patch configmap config-network -n knative-serving --type merge -p '{"data":{"external-domain-tls":"Enabled"}}'` + "\n" +
	"# or, where a load balancer or ingress in front already serves TLS for the domain:\n" +
	`kubectl patch configmap config-network -n knative-serving --type merge -p '{"data":{"default-external-scheme":"https"}}'`

// untrustedFix is what to do about a route whose certificate does not verify.
const untrustedFix = "# registries call only routes whose certificates they trust: one from a public CA, such as\n" +
	"# cert-manager's with an ACME ClusterIssuer (Knative's external-domain-tls), or, where every\n" +
	"# registry that calls the route trusts your private CA, check against that CA:\n" +
	"reflector check --ca-file=<your CA's certificates, PEM>"

// untrusted tells whether err is a TLS certificate that did not verify: an unknown
// authority, another host's name, or an expired or otherwise invalid certificate.
func untrusted(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

// WebhookRoute checks that the public webhook route, the Knative Service reflector-webhook, has
// an https URL (registries such as EventBridge API destinations and Pub/Sub push call only
// https), and with probe that its /healthz answers there. allowHTTP accepts an http URL, for
// a route that only registries inside a private network call. A certificate that does not
// verify fails with its own fix.
func WebhookRoute(ctx context.Context, ksvc *unstructured.Unstructured, probe Prober, allowHTTP bool) Result {
	const name = "Webhook route"
	if ksvc == nil {
		return fail(name, "reflector-system/reflector-webhook does not exist: reflector is not installed", "kubectl apply -f install.yaml   # the release's (docs/install.md)")
	}
	raw, _, _ := unstructured.NestedString(ksvc.Object, "status", "url")
	if raw == "" {
		return fail(name, "reflector-webhook has no URL yet", "kubectl -n reflector-system describe ksvc reflector-webhook")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fail(name, "reflector-webhook's URL cannot be parsed", "kubectl -n reflector-system describe ksvc reflector-webhook")
	}
	shown := u.Redacted()
	over := " answers over TLS"
	switch {
	case u.Scheme == "http" && allowHTTP:
		over = " answers (http, allowed by --allow-http)"
	case u.Scheme != "https":
		return fail(name, shown+" is not https: registries that call only https endpoints cannot reach it", tlsFix)
	}
	if probe == nil {
		return pass(name, shown)
	}
	if err := probe(ctx, u.JoinPath("healthz").String()); err != nil {
		if untrusted(err) {
			return fail(name, fmt.Sprintf("%s/healthz: the route's certificate is not trusted: %v", shown, redact.String(err.Error())), untrustedFix)
		}
		return fail(name, fmt.Sprintf("%s/healthz: %v", shown, redact.String(err.Error())),
			"kubectl -n reflector-system get ksvc reflector-webhook   # READY True?\n"+
				"curl -v "+u.JoinPath("healthz").Redacted()+"   # from outside the cluster: DNS, the load balancer, the certificate")
	}
	return pass(name, shown+over)
}
