#!/usr/bin/env bash
# Builds controller-gen (sigs.k8s.io/controller-tools) from the Go module proxy into the cache
# directory that hack/testenv.sh uses, once per version, for hack/flux-crds.sh. The published
# module has no replace directives, so `go install` builds it as it is, into a temporary GOBIN
# inside the cache; the binary is then moved to its versioned name.
# Prints the path of the binary. Idempotent: once built it returns at once.
set -euo pipefail

CONTROLLER_GEN_VERSION=${CONTROLLER_GEN_VERSION:-v0.23.0}
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
out=$BIN/controller-gen-$CONTROLLER_GEN_VERSION
mkdir -p "$BIN"

if [ ! -x "$out" ]; then
  echo "controller-gen: building controller-gen $CONTROLLER_GEN_VERSION" >&2
  gobin=$(mktemp -d "$CACHE/build-controller-gen.XXXX")
  trap 'rm -rf "$gobin"' EXIT
  GOBIN=$gobin go install -trimpath "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION"
  mv "$gobin/controller-gen" "$out"
fi
ln -sf "controller-gen-$CONTROLLER_GEN_VERSION" "$BIN/controller-gen"
echo "$out"
