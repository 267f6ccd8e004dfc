// Package policy selects the latest tag of an image repository for an ImagePolicy, with the
// rules of Flux's image-reflector-controller (image.toolkit.fluxcd.io/v1):
//
//   - semver: the range is a Masterminds semver/v3 constraint. A tag is a version when, after
//     one leading lowercase "v" is removed, it is a strict MAJOR.MINOR.PATCH[-pre][+build] of
//     at most 256 bytes; every other tag is skipped. A prerelease satisfies the range only when
//     the range names a prerelease itself (">=1.0.0-0"). The highest version wins.
//   - alphabetical: byte-wise order; "asc" (the default) picks the greatest, "desc" the least.
//   - numerical: every candidate must parse with strconv.ParseFloat, or the evaluation fails
//     naming the tag; "asc" (the default) picks the greatest, "desc" the least. NaN orders
//     below every number, as in cmp.Compare.
//   - filterTags: the pattern is an unanchored RE2 expression and tags it does not match are
//     dropped; with extract, the policy compares the expansion of the template ("$1", "${name}")
//     instead of the tag. The tag reported is always the original.
//
// Before any rule, tags that name a signature, attestation or referrer ("sha256-" and a
// digest's 64 hex digits, alone or followed by "." and a suffix such as ".sig", ".att",
// ".sbom") are dropped: they are never images to deploy (IsReferrerTag).
//
// Ties are broken the same way in every path: when two candidates compare equal (versions
// that differ only in build metadata or a "v" prefix, tags that extract to the same value,
// numbers such as "1" and "1.0"), the one whose original tag is greatest byte-wise wins, in
// both orders. Flux leaves this choice to the order of the list, or of a map; fixing it keeps
// the latest tag stable from one evaluation to the next.
//
// Every error NewSelector returns wraps ErrInvalidPolicy. Latest returns an error wrapping
// ErrNoCandidates when nothing is left to choose from, so that a caller can keep the previous
// latest tag; a numerical value that does not parse is a third kind of error, one that names
// the tag. The package does no I/O.
package policy
