// Package signature decides whether an image's digest carries a valid signature, for
// ImagePolicy spec.verify.
//
// For provider cosign, it reads signatures where cosign writes them: the legacy
// "sha256-<hex>.sig" tag (a manifest whose layers are simple-signing payloads, each with its
// signature in an annotation) and OCI 1.1 referrers of the digest that hold a Sigstore bundle
// (cosign v3's default). Bundles are verified with sigstore-go.
//
// Keyless cosign signatures verify under a Sigstore trusted root: the Secret's trusted_root.json,
// or, for a spec.verify without a secretRef, the Sigstore public-good one, which a TUFRoot
// fetches with sigstore-go's TUF client from https://tuf-repo-cdn.sigstore.dev (or a mirror) on
// first need, keeps for a day, and bounds in size, requests and time. When it cannot be had,
// New returns a *TUFError: no verdict, a later attempt may succeed. A Verifier's ID hashes the
// trusted root's bytes, so a rotated root is a new ID.
//
// For provider notation, it reads the digest's referrers of artifact type
// application/vnd.cncf.notary.signature, as `notation sign` pushes them: a manifest of one layer,
// a JWS or COSE envelope over the signed manifest's descriptor. notation-go verifies each under
// the trust policy document (trustpolicy.json) and the trust store (the .crt and .pem
// certificates) of the Secret, with the artifact named host/repository@sha256:... as the trust
// policy's registryScopes name it.
//
// Referrers are listed through the referrers API or, on registries without it, the referrers
// tag schema. All registry reads go through go-containerregistry, and each is bounded.
//
// Only the policy function links this package: it brings the Sigstore and Notation libraries,
// which the scan function and the cron reconciler do not need.
package signature
