// Package signature decides whether an image's digest carries a valid signature, for
// ImagePolicy spec.verify. It reads signatures where cosign writes them: the legacy
// "sha256-<hex>.sig" tag (a manifest whose layers are simple-signing payloads, each with its
// signature in an annotation) and OCI 1.1 referrers of the digest that hold a Sigstore bundle
// (cosign v3's default), through the referrers API or, on registries without it, the referrers
// tag schema. Bundles are verified with sigstore-go.
//
// Only the policy function links this package: it brings the Sigstore libraries, which the scan
// function and the cron reconciler do not need.
package signature
