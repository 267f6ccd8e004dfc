package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImagePolicyKind is the kind of ImagePolicy objects.
const ImagePolicyKind = "ImagePolicy"

// DefaultDigestRefreshInterval is the digest refresh interval of an ImagePolicy with
// digestReflectionPolicy Always and a zero interval.
const DefaultDigestRefreshInterval = 10 * time.Minute

// ImagePolicySpec defines the parameters for calculating the ImagePolicy.
// +kubebuilder:validation:XValidation:rule="!has(self.interval) || (has(self.digestReflectionPolicy) && self.digestReflectionPolicy == 'Always')", message="spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'"
// +kubebuilder:validation:XValidation:rule="has(self.interval) || !has(self.digestReflectionPolicy) || self.digestReflectionPolicy != 'Always'", message="spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'"
type ImagePolicySpec struct {
	// ImageRepositoryRef points at the object specifying the image being scanned.
	// +required
	ImageRepositoryRef NamespacedObjectReference `json:"imageRepositoryRef"`

	// Policy gives the particulars of the policy to be followed in selecting the most recent
	// image.
	// +required
	Policy ImagePolicyChoice `json:"policy"`

	// FilterTags enables filtering for only a subset of tags based on a set of rules. If no rules
	// are provided, all the tags from the repository will be ordered and compared.
	// +optional
	FilterTags *TagFilter `json:"filterTags,omitempty"`

	// DigestReflectionPolicy governs the setting of the `.status.latestRef.digest` field.
	//
	// Never: The digest field will always be set to the empty string.
	//
	// IfNotPresent: The digest field will be set to the digest of the elected latest image if the
	// field is empty and the image did not change.
	//
	// Always: The digest field will always be set to the digest of the elected latest image.
	//
	// Default: Never.
	// +kubebuilder:default:=Never
	DigestReflectionPolicy ReflectionPolicy `json:"digestReflectionPolicy,omitempty"`

	// Interval is the length of time to wait between refreshing the digest of the latest tag
	// when the reflection policy is set to "Always".
	//
	// Defaults to 10m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Suspend tells reflector to suspend subsequent policy evaluations. It does not apply to
	// evaluations already started. Defaults to false.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Verify lets only images whose signature verifies become the latest: the tags are taken
	// in the policy's order, best first, and the first whose digest carries a valid signature
	// is selected. Newer tags without one are reported and skipped. It has the shape and
	// meaning of Flux source-controller's OCIRepository spec.verify.
	// +optional
	Verify *OCIRepositoryVerification `json:"verify,omitempty"`
}

// Verification providers that spec.verify.provider accepts.
const (
	VerificationProviderCosign   = "cosign"
	VerificationProviderNotation = "notation"
)

// OCIRepositoryVerification verifies the authenticity of an OCI artifact.
type OCIRepositoryVerification struct {
	// Provider specifies the technology used to sign the OCI artifact.
	// +kubebuilder:validation:Enum=cosign;notation
	// +kubebuilder:default:=cosign
	Provider string `json:"provider"`

	// SecretRef specifies the Kubernetes Secret containing the trusted public keys: for
	// cosign, one or more PEM-encoded public keys, each under a key ending in ".pub", or a
	// Sigstore trusted root under "trusted_root.json" for keyless signatures; for Notation, the
	// trust store's certificates (PEM, one or more per entry) under keys ending in ".crt" or
	// ".pem", and the Notation trust policy document (version 1.0) under "trustpolicy.json".
	// Without it, cosign keyless signatures are verified under the Sigstore public-good
	// trusted root, fetched through TUF.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// MatchOIDCIdentity specifies the identity matching criteria to use while verifying an
	// OCI artifact which was signed using cosign keyless signing. The artifact's identity is
	// deemed to be verified if any of the specified matchers match against the identity.
	// +optional
	MatchOIDCIdentity []OIDCIdentityMatch `json:"matchOIDCIdentity,omitempty"`
}

// OIDCIdentityMatch specifies options for verifying the certificate identity, i.e. the issuer
// and the subject of the certificate.
type OIDCIdentityMatch struct {
	// Issuer specifies the regex pattern to match against to verify the OIDC issuer in the
	// Fulcio certificate. The pattern must be a valid Go regular expression.
	// +required
	Issuer string `json:"issuer"`
	// Subject specifies the regex pattern to match against to verify the identity subject in
	// the Fulcio certificate. The pattern must be a valid Go regular expression.
	// +required
	Subject string `json:"subject"`
}

// ReflectionPolicy describes whether and when a value from the registry is reflected in a field.
// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
type ReflectionPolicy string

const (
	// ReflectAlways reflects the registry's value on every evaluation, overwriting the old one.
	ReflectAlways ReflectionPolicy = "Always"
	// ReflectIfNotPresent reflects the registry's value only while the field is empty or the
	// image changed.
	ReflectIfNotPresent ReflectionPolicy = "IfNotPresent"
	// ReflectNever reflects nothing.
	ReflectNever ReflectionPolicy = "Never"
)

// ImagePolicyChoice is a union of all the kinds of policy that can be supplied.
type ImagePolicyChoice struct {
	// SemVer gives a semantic version range to check against the tags available.
	// +optional
	SemVer *SemVerPolicy `json:"semver,omitempty"`
	// Alphabetical set of rules to use for alphabetical ordering of the tags.
	// +optional
	Alphabetical *AlphabeticalPolicy `json:"alphabetical,omitempty"`
	// Numerical set of rules to use for numerical ordering of the tags.
	// +optional
	Numerical *NumericalPolicy `json:"numerical,omitempty"`
}

// SemVerPolicy specifies a semantic version policy.
type SemVerPolicy struct {
	// Range gives a semver range for the image tag; the highest version within the range that's
	// a tag yields the latest image.
	// +required
	Range string `json:"range"`
}

// Orders that the alphabetical and numerical policies accept.
const (
	OrderAsc  = "asc"
	OrderDesc = "desc"
)

// AlphabeticalPolicy specifies an alphabetical ordering policy.
type AlphabeticalPolicy struct {
	// Order specifies the sorting order of the tags. Given the letters of the alphabet as tags,
	// ascending order would select Z, and descending order would select A.
	// +kubebuilder:default:="asc"
	// +kubebuilder:validation:Enum=asc;desc
	// +optional
	Order string `json:"order,omitempty"`
}

// NumericalPolicy specifies a numerical ordering policy.
type NumericalPolicy struct {
	// Order specifies the sorting order of the tags. Given the integer values from 0 to 9 as
	// tags, ascending order would select 9, and descending order would select 0.
	// +kubebuilder:default:="asc"
	// +kubebuilder:validation:Enum=asc;desc
	// +optional
	Order string `json:"order,omitempty"`
}

// TagFilter enables filtering tags based on a set of defined rules.
type TagFilter struct {
	// Pattern specifies a regular expression pattern used to filter for image tags.
	// +optional
	Pattern string `json:"pattern"`
	// Extract allows a capture group to be extracted from the specified regular expression
	// pattern, useful before tag evaluation.
	// +optional
	Extract string `json:"extract"`
}

// ImageRef represents an image reference.
type ImageRef struct {
	// Name is the bare image's name.
	// +required
	Name string `json:"name"`
	// Tag is the image's tag.
	// +required
	Tag string `json:"tag"`
	// Digest is the image's digest.
	// +optional
	Digest string `json:"digest,omitempty"`
}

// String returns the reference as name:tag, followed by @digest when there is one.
func (in *ImageRef) String() string {
	s := in.Name + ":" + in.Tag
	if in.Digest != "" {
		s += "@" + in.Digest
	}
	return s
}

// ImagePolicyStatus defines the observed state of an ImagePolicy.
type ImagePolicyStatus struct {
	// LatestRef gives the first in the list of images scanned by the image repository, when
	// filtered and ordered according to the policy.
	// +optional
	LatestRef *ImageRef `json:"latestRef,omitempty"`
	// ObservedPreviousRef is the observed previous LatestRef. It is used to keep track of the
	// previous and current images.
	// +optional
	ObservedPreviousRef *ImageRef `json:"observedPreviousRef,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedTagsRevision is the tag revision (the ImageRepository's
	// status.lastScanResult.revision) that the last successful evaluation read. reflector's own
	// field: Flux's ImagePolicy has none, and an apiserver serving Flux's CRD prunes it, which
	// leaves the policy to be evaluated again rather than wrong.
	// +optional
	ObservedTagsRevision string `json:"observedTagsRevision,omitempty"`

	ReconcileRequestStatus `json:",inline"`
}

// +kubebuilder:storageversion
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=imgpol;imagepol,categories=all;fluxcd;fluxcd-images
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.latestRef.name`
// +kubebuilder:printcolumn:name="Tag",type=string,JSONPath=`.status.latestRef.tag`
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description=""
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].message",description=""
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description=""
// +kubebuilder:selectablefield:JSONPath=`.spec.imageRepositoryRef.name`

// ImagePolicy selects the latest image of an ImageRepository by a policy.
type ImagePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ImagePolicySpec `json:"spec,omitempty"`
	// +kubebuilder:default={"observedGeneration":-1}
	Status ImagePolicyStatus `json:"status,omitempty"`
}

// GetDigestReflectionPolicy returns spec.digestReflectionPolicy, or Never when it is empty.
func (in *ImagePolicy) GetDigestReflectionPolicy() ReflectionPolicy {
	if in.Spec.DigestReflectionPolicy != "" {
		return in.Spec.DigestReflectionPolicy
	}
	return ReflectNever
}

// GetInterval returns how often the digest of the latest tag is refreshed: spec.interval (10m
// when zero) with digestReflectionPolicy Always, and 0 (never) otherwise.
func (in *ImagePolicy) GetInterval() time.Duration {
	if in.GetDigestReflectionPolicy() != ReflectAlways {
		return 0
	}
	if in.Spec.Interval == nil || in.Spec.Interval.Duration == 0 {
		return DefaultDigestRefreshInterval
	}
	return in.Spec.Interval.Duration
}

// RepositoryNamespace returns the namespace of the referenced ImageRepository: the reference's
// own, or the policy's when the reference has none.
func (in *ImagePolicy) RepositoryNamespace() string {
	if ns := in.Spec.ImageRepositoryRef.Namespace; ns != "" {
		return ns
	}
	return in.Namespace
}

// +kubebuilder:object:root=true

// ImagePolicyList is a list of ImagePolicy objects.
type ImagePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImagePolicy `json:"items"`
}
