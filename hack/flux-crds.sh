#!/usr/bin/env bash
# Generates Flux's image.toolkit.fluxcd.io CRDs on this machine, as Flux's own build does: with
# controller-gen (hack/controller-gen.sh) from the API types of
# github.com/fluxcd/image-reflector-controller/api, at the version that the flux CLI of
# hack/flux.sh (FLUX_VERSION) depends on, read from its go.mod. The API module is copied from
# the module cache into a temporary directory, where controller-gen loads it as the main
# module (with its own go.mod and go.sum). The CRDs go into the cache directory that
# hack/testenv.sh uses, bin/flux-crds-<API version>, linked as bin/flux-crds; they are never
# part of the repository. The node test applies them as Flux's install does; the preflight
# test as a cluster that ran Flux meets them.
# Prints the directory. Idempotent: once generated it returns at once.
set -euo pipefail

FLUX_VERSION=${FLUX_VERSION:-v2.9.5}
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
API=github.com/fluxcd/image-reflector-controller/api
mkdir -p "$BIN"

gomod=$(go mod download -json "github.com/fluxcd/flux2/v2@$FLUX_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
version=$(awk -v api="$API" '$1 == api { print $2; exit }' "$gomod")
if [ -z "$version" ]; then
  echo "flux-crds: flux $FLUX_VERSION's go.mod ($gomod) does not require $API" >&2
  exit 1
fi
out=$BIN/flux-crds-$version

if [ ! -f "$out/image.toolkit.fluxcd.io_imagepolicies.yaml" ]; then
  gen=$("$(dirname "$0")/controller-gen.sh")
  echo "flux-crds: generating Flux's CRDs from $API@$version" >&2
  src=$(go mod download -json "$API@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  work=$(mktemp -d "$CACHE/build-flux-crds.XXXX")
  trap 'chmod -R u+w "$work" && rm -rf "$work"' EXIT
  cp -r "$src/." "$work/api"
  chmod -R u+w "$work/api"
  (cd "$work/api" && "$gen" crd paths=./... output:crd:dir="$work/crds")
  for kind in imagerepositories imagepolicies; do
    test -f "$work/crds/image.toolkit.fluxcd.io_$kind.yaml" || { echo "flux-crds: controller-gen wrote no $kind CRD" >&2; exit 1; }
  done
  rm -rf "$out"
  mv "$work/crds" "$out"
fi
ln -sfn "flux-crds-$version" "$BIN/flux-crds"
echo "$out"
