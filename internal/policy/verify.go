package policy

import (
	"fmt"
	"regexp"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// checkVerify validates spec.verify as far as the spec alone tells: a known provider, a
// secretRef with a name, and identity patterns that compile. Whether the provider and mode are
// supported, and the Secret's keys, are for the verifier.
func checkVerify(v *v1.OCIRepositoryVerification) error {
	if v == nil {
		return nil
	}
	switch v.Provider {
	case "", v1.VerificationProviderCosign, v1.VerificationProviderNotation:
	default:
		return fmt.Errorf("verify provider %q: must be one of %s, %s", v.Provider, v1.VerificationProviderCosign, v1.VerificationProviderNotation)
	}
	if v.SecretRef != nil && v.SecretRef.Name == "" {
		return fmt.Errorf("verify secretRef: name is required")
	}
	for i, m := range v.MatchOIDCIdentity {
		if _, err := regexp.Compile(m.Issuer); err != nil {
			return fmt.Errorf("verify matchOIDCIdentity[%d].issuer %q: %w", i, m.Issuer, err)
		}
		if _, err := regexp.Compile(m.Subject); err != nil {
			return fmt.Errorf("verify matchOIDCIdentity[%d].subject %q: %w", i, m.Subject, err)
		}
	}
	return nil
}
