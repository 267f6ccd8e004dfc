#!/usr/bin/env bash
# Builds the cosign CLI from the Go module proxy into the cache directory that hack/testenv.sh
# and hack/flux.sh use, once per version. The published module has no replace directives, so
# `go install` builds it as it is, into a temporary GOBIN inside the cache; the binary is then
# moved to its versioned name. The version is stamped the way cosign's own release does
# (sigs.k8s.io/release-utils/version), so that `cosign version` names it.
# Prints the path of the binary (about 140 MB). Idempotent: once built it returns at once.
# Measured 2026-12-02 with `nice -n 10 /usr/bin/time -v`, modules downloaded by the build and
# an empty build cache for most of cosign's dependencies, beside another long build (load
# average 3.4 at the start, 11-13 during it): 13 min 1 s wall, 6 min 58 s user and 1 min 16 s
# system time, 1.8 GB peak memory.
set -euo pipefail

COSIGN_VERSION=${COSIGN_VERSION:-v3.1.3}
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
out=$BIN/cosign-$COSIGN_VERSION
mkdir -p "$BIN"

if [ ! -x "$out" ]; then
  echo "cosign: building the cosign CLI $COSIGN_VERSION" >&2
  gobin=$(mktemp -d "$CACHE/build-cosign.XXXX")
  trap 'rm -rf "$gobin"' EXIT
  GOBIN=$gobin go install -trimpath \
    -ldflags "-buildid= -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
    "github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_VERSION"
  mv "$gobin/cosign" "$out"
fi
ln -sf "cosign-$COSIGN_VERSION" "$BIN/cosign"
echo "$out"
