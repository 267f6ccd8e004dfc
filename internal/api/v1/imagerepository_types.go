package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageRepositoryKind is the kind of ImageRepository objects.
const ImageRepositoryKind = "ImageRepository"

// DefaultExclusionList is the exclusion list applied when spec.exclusionList is empty: it keeps
// cosign signature tags out of the tag store.
var DefaultExclusionList = []string{`^.*\.sig$`}

// Providers that spec.provider accepts.
const (
	GenericProvider = "generic"
	AWSProvider     = "aws"
	AzureProvider   = "azure"
	GCPProvider     = "gcp"
)

// ImageRepositorySpec defines the parameters for scanning an image repository, e.g. `fluxcd/flux`.
type ImageRepositorySpec struct {
	// Image is the name of the image repository.
	// +required
	Image string `json:"image,omitempty"`

	// Interval is the length of time to wait between scans of the image repository.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Interval metav1.Duration `json:"interval,omitempty"`

	// Timeout for image scanning. Defaults to 'Interval' duration.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// SecretRef names a Secret of type kubernetes.io/dockerconfigjson, created with
	// `kubectl create secret docker-registry` or the equivalent, holding the credentials for the
	// image registry.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// ProxySecretRef names a Secret holding the proxy to use while communicating with the
	// registry: `address`, and optionally `username` and `password`.
	// +optional
	ProxySecretRef *LocalObjectReference `json:"proxySecretRef,omitempty"`

	// ServiceAccountName is the name of the Kubernetes ServiceAccount whose image pull secrets
	// are used to authenticate with the registry.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// CertSecretRef names a Secret holding either or both of a PEM-encoded client certificate
	// (`tls.crt`) and private key (`tls.key`), and a PEM-encoded CA certificate (`ca.crt`), used
	// for connecting to the registry. The Secret must be of type `Opaque` or `kubernetes.io/tls`.
	// +optional
	CertSecretRef *LocalObjectReference `json:"certSecretRef,omitempty"`

	// Suspend tells reflector to suspend subsequent image scans. It does not apply to scans
	// already started. Defaults to false.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// AccessFrom defines an ACL for allowing cross-namespace references to the ImageRepository
	// object based on the caller's namespace labels.
	// +optional
	AccessFrom *AccessFrom `json:"accessFrom,omitempty"`

	// ExclusionList is a list of regular expressions; tags matching any of them are not stored.
	// +kubebuilder:default:={"^.*\\.sig$"}
	// +kubebuilder:validation:MaxItems:=25
	// +optional
	ExclusionList []string `json:"exclusionList,omitempty"`

	// Provider used for authentication: 'aws', 'azure', 'gcp' or 'generic'. Defaults to 'generic'.
	// +kubebuilder:validation:Enum=generic;aws;azure;gcp
	// +kubebuilder:default:=generic
	// +optional
	Provider string `json:"provider,omitempty"`

	// Insecure allows connecting to a non-TLS HTTP container registry.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// ScanResult describes the last successful scan of an image repository.
type ScanResult struct {
	// Revision is a stable hash of the scanned tags.
	// +optional
	Revision string `json:"revision"`

	// TagCount is the number of tags found in the last scan.
	// +required
	TagCount int `json:"tagCount"`

	// ScanTime is the time when the last scan was performed.
	// +optional
	ScanTime metav1.Time `json:"scanTime"`

	// LatestTags is a small sample of the tags found in the last scan: the first 10 tags in
	// descending alphabetical order.
	// +optional
	LatestTags []string `json:"latestTags,omitempty"`
}

// ImageRepositoryStatus defines the observed state of an ImageRepository.
type ImageRepositoryStatus struct {
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the last reconciled generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CanonicalImageName is the name of the image repository with all the implied parts made
	// explicit, e.g. `index.docker.io/library/alpine` rather than `alpine`.
	// +optional
	CanonicalImageName string `json:"canonicalImageName,omitempty"`

	// LastScanResult describes the last successful scan.
	// +optional
	LastScanResult *ScanResult `json:"lastScanResult,omitempty"`

	// ObservedExclusionList is the exclusion list that the scan in lastScanResult applied.
	// +optional
	ObservedExclusionList []string `json:"observedExclusionList,omitempty"`

	ReconcileRequestStatus `json:",inline"`
}

// +kubebuilder:storageversion
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=imgrepo;imagerepo,categories=all;fluxcd;fluxcd-images
// +kubebuilder:printcolumn:name="Image",type="string",JSONPath=".spec.image"
// +kubebuilder:printcolumn:name="Tags",type=string,JSONPath=`.status.lastScanResult.tagCount`
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description=""
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].message",description=""
// +kubebuilder:printcolumn:name="Last scan",type=string,JSONPath=`.status.lastScanResult.scanTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description=""

// ImageRepository is an image repository whose tags reflector keeps current.
type ImageRepository struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ImageRepositorySpec `json:"spec,omitempty"`
	// +kubebuilder:default={"observedGeneration":-1}
	Status ImageRepositoryStatus `json:"status,omitempty"`
}

// GetTimeout returns the scan timeout: spec.timeout, else spec.interval, and at least a second.
func (in *ImageRepository) GetTimeout() time.Duration {
	d := in.Spec.Interval.Duration
	if in.Spec.Timeout != nil {
		d = in.Spec.Timeout.Duration
	}
	return max(d, time.Second)
}

// GetExclusionList returns spec.exclusionList, or the default when it is empty.
func (in *ImageRepository) GetExclusionList() []string {
	if len(in.Spec.ExclusionList) > 0 {
		return in.Spec.ExclusionList
	}
	return DefaultExclusionList
}

// GetProvider returns spec.provider, or "generic" when it is empty.
func (in *ImageRepository) GetProvider() string {
	if in.Spec.Provider != "" {
		return in.Spec.Provider
	}
	return GenericProvider
}

// GetRequeueAfter returns how long after a scan the next one is due.
func (in *ImageRepository) GetRequeueAfter() time.Duration {
	return in.Spec.Interval.Duration
}

// +kubebuilder:object:root=true

// ImageRepositoryList is a list of ImageRepository objects.
type ImageRepositoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageRepository `json:"items"`
}
