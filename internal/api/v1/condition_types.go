package v1

// ReconcileRequestAnnotation is the annotation that requests an out-of-band reconciliation; its
// value (an RFC 3339 timestamp by convention) is copied into status.lastHandledReconcileAt once the
// request has been acted upon. `flux reconcile` and reflector's scan function both set it.
const ReconcileRequestAnnotation = "reconcile.fluxcd.io/requestedAt"

// ImageFinalizer is the finalizer that Flux's image-reflector-controller puts on every object it
// reconciles. reflector never adds it; it removes it from objects being deleted, so that objects
// Flux's controller left behind are not kept forever.
const ImageFinalizer = "finalizers.fluxcd.io"

// Condition types, as all Flux objects use them.
const (
	// ReadyCondition tells whether the object's last reconciliation succeeded.
	ReadyCondition = "Ready"
	// ReconcilingCondition is present while a reconciliation is in progress or being retried.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is present when reconciliation cannot go on without a change of the spec.
	StalledCondition = "Stalled"
	// TagsEvaluatedCondition is reflector's own condition on an ImagePolicy, written by every
	// successful evaluation with status.observedTagsRevision: its reason is EvaluatedReason or
	// SkippedUnverifiedReason, and its message repeats, for people, the tag revision that the
	// field records. Flux's tooling ignores condition types it does not know.
	TagsEvaluatedCondition = "TagsEvaluated"
)

// Condition reasons, with the names Flux uses for them.
const (
	// EvaluatedReason is the reason of TagsEvaluatedCondition when the evaluation selected the
	// best candidate.
	EvaluatedReason = "Evaluated"
	// SkippedUnverifiedReason is the reason of TagsEvaluatedCondition when the evaluation, of a
	// policy with spec.verify, skipped better candidates whose signatures did not verify (Ready's
	// message names them): they may be signed later, so the policy is evaluated again.
	SkippedUnverifiedReason = "SkippedUnverified"
	// SucceededReason signals that the reconciliation succeeded.
	SucceededReason = "Succeeded"
	// FailedReason signals that the reconciliation failed.
	FailedReason = "Failed"
	// FailureReason is the reason Flux's ImagePolicy uses when no tag could be selected.
	FailureReason = "Failure"
	// ProgressingReason signals that a reconciliation is under way.
	ProgressingReason = "Progressing"
	// ProgressingWithRetryReason signals that a failed reconciliation will be retried.
	ProgressingWithRetryReason = "ProgressingWithRetry"
	// ImageURLInvalidReason signals that spec.image is not a valid image repository reference.
	ImageURLInvalidReason = "ImageURLInvalid"
	// DependencyNotReadyReason signals that an object this one depends on is not ready.
	DependencyNotReadyReason = "DependencyNotReady"
	// AuthenticationFailedReason signals that credentials are missing, malformed or refused.
	AuthenticationFailedReason = "AuthenticationFailed"
	// ReadOperationFailedReason signals a failure to read from the registry or the tag store.
	ReadOperationFailedReason = "ReadOperationFailed"
	// TagStoreDamagedReason signals that the tag store was found damaged: the object's tags could
	// not be stored or read, or were lost when the damaged store was set aside and rebuilt.
	TagStoreDamagedReason = "TagStoreDamaged"
	// TagStoreFullReason signals that the tag store's volume has no room left for the tags.
	TagStoreFullReason = "TagStoreFull"
	// IntervalNotConfiguredReason signals that spec.interval is missing where it is required.
	IntervalNotConfiguredReason = "IntervalNotConfigured"
	// AccessDeniedReason signals that a cross-namespace reference is not allowed.
	AccessDeniedReason = "AccessDenied"
	// InvalidPolicyReason signals that an ImagePolicy's policy or filter cannot be used.
	InvalidPolicyReason = "InvalidPolicy"
	// UnsupportedProviderReason signals an ImageRepository provider that reflector cannot
	// authenticate with.
	UnsupportedProviderReason = "UnsupportedProvider"
	// FeatureGateDisabledReason signals that the object asks for something that a feature
	// gate of reflector, off in this installation, would allow: object-level workload identity.
	FeatureGateDisabledReason = "FeatureGateDisabled"
	// VerificationErrorReason signals that spec.verify could not be satisfied: no candidate
	// image carries a valid signature, or the trusted keys cannot be used. It is the reason
	// Flux's source-controller gives its own verification failures.
	VerificationErrorReason = "VerificationError"
	// AddressNotAllowedReason signals that a connection made for the object, to its registry, a
	// redirect or a token endpoint, led to an address that reflector does not connect to:
	// loopback, private, link-local and the like, unless the administrator allows it.
	AddressNotAllowedReason = "AddressNotAllowed"
	// TransportNotTrustedReason signals that the object would send reflector's own cloud
	// credentials through a transport it chooses itself: its proxy, its CA or plain HTTP.
	TransportNotTrustedReason = "TransportNotTrusted"
)
