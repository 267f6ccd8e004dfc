#!/usr/bin/env bash
# Builds the flux CLI from the Go module proxy into the cache directory that hack/testenv.sh
# uses, once per version. `go install` cannot build it: cmd/flux embeds manifests/*.yaml,
# which the published module leaves out, and its go.mod replaces gopkg.in/yaml.v3, which only
# holds in the main module. So it is built from a copy of the module with one placeholder YAML
# file there (the install manifests are not used by the commands the tests run).
# Prints the path of the binary. Idempotent. About 12 minutes of CPU time the first time
# (docs/benchmarks.md).
set -euo pipefail

FLUX_VERSION=${FLUX_VERSION:-v2.9.5}
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
out=$BIN/flux-$FLUX_VERSION
mkdir -p "$BIN"

if [ ! -x "$out" ]; then
  echo "flux: building the flux CLI $FLUX_VERSION" >&2
  src=$(go mod download -json "github.com/fluxcd/flux2/v2@$FLUX_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  work=$(mktemp -d "$CACHE/build-flux.XXXX")
  trap 'chmod -R u+w "$work" && rm -rf "$work"' EXIT
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  mkdir -p "$work/cmd/flux/manifests"
  printf '# placeholder: the module zip carries no install manifests\n' > "$work/cmd/flux/manifests/placeholder.yaml"
  (cd "$work" && go build -trimpath -ldflags "-X main.VERSION=${FLUX_VERSION#v}" -o "$out.tmp" ./cmd/flux)
  mv "$out.tmp" "$out"
fi
ln -sf "flux-$FLUX_VERSION" "$BIN/flux"
echo "$out"
