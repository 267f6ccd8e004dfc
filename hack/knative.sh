#!/usr/bin/env bash
# Builds Knative's programs from the Go module proxy into the cache directory that
# hack/testenv.sh uses, once per version and probe patch:
#   - Serving's controller and webhook (hack/tools/knative-serving, a module that requires
#     knative.dev/serving at the version its go.mod pins);
#   - Eventing's controller and webhook, and the ApiServerSource receive adapter
#     (hack/tools/knative, the same for knative.dev/eventing; `go install ...@version` cannot
#     build Eventing).
# Every program is built against a copy of knative.dev/pkg with the files of
# hack/tools/knative/_overlay in place of its own (the Go toolchain refuses -overlay for files in
# the module cache, hence the copy):
#   - injection/health_check.go: Knative serves kubelet probes on port 8080, which its code fixes;
#     outside a pod its programs share one host, so the probe server listens where
#     KNATIVE_PROBES_PORT says;
#   - version/version.go: the apiserver version check ignores build metadata, which
#     hack/testenv.sh's kube-apiserver reports as "+$Format:%H$", not semver;
#   - listen_addr.go in webhook/, profiling/ and observability/runtime/, with the edits that
#     tools/knative/_listen.tsv lists (file, text, replacement; each text must occur once):
#     Knative's servers listen on every interface, and KNATIVE_LISTEN_HOST names one host
#     instead, so that the tests' programs bind 127.0.0.1 only. (Its metrics server takes
#     METRICS_PROMETHEUS_HOST already.)
# Prints the directory holding the binaries. Idempotent: nothing is built when they exist.
# About 7 minutes on 2 cores with a warm module cache.
set -euo pipefail
cd "$(dirname "$0")"
HACK=$PWD

SERVING_VERSION=$(cd tools/knative-serving && go list -m -f '{{.Version}}' knative.dev/serving)
EVENTING_VERSION=$(cd tools/knative && go list -m -f '{{.Version}}' knative.dev/eventing)
OVERLAY=$HACK/tools/knative/_overlay
EDITS=$HACK/tools/knative/_listen.tsv
PATCH=$( (cd "$OVERLAY" && find . -type f | LC_ALL=C sort | xargs sha256sum; sha256sum <"$EDITS") | sha256sum | cut -c1-8)
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
mkdir -p "$BIN"

log() { echo "knative: $*" >&2; }

# edit_copy DIR makes the edits of $EDITS in a copy of knative.dev/pkg, and fails when a text
# does not occur exactly once (a new version of knative.dev/pkg moved it).
edit_copy() {
  local dir=$1 file from to n content
  while IFS=$'\t' read -r file from to; do
    [ -n "$file" ] || continue
    n=$(grep -cF -- "$from" "$dir/$file" || true)
    [ "$n" = 1 ] || { log "$file: '$from' occurs $n times, not once"; return 1; }
    content=$(<"$dir/$file")
    printf '%s\n' "${content/"$from"/"$to"}" >"$dir/$file"
  done <"$EDITS"
}

# patched_modfile MODULE_DIR WORK writes WORK/go.mod and go.sum: the module's, with
# knative.dev/pkg replaced by a copy that carries the files of the overlay. The copy stays in the
# cache at a path of its own, so that Go's build cache serves a second build.
patched_modfile() {
  local mod=$1 work=$2 pkg version copy
  # go list -m names no directory for a module not yet in the module cache: download it first.
  (cd "$mod" && go mod download knative.dev/pkg)
  pkg=$(cd "$mod" && go list -m -f '{{.Dir}}' knative.dev/pkg)
  [ -n "$pkg" ] || { log "knative.dev/pkg is not in the module cache"; return 1; }
  version=$(cd "$mod" && go list -m -f '{{.Version}}' knative.dev/pkg)
  copy=$CACHE/src/knative-pkg-$version-$PATCH
  if [ ! -d "$copy" ]; then
    rm -rf "$copy.tmp" && mkdir -p "$CACHE/src"
    cp -r "$pkg" "$copy.tmp"
    chmod -R u+w "$copy.tmp"
    cp -r "$OVERLAY/." "$copy.tmp/"
    edit_copy "$copy.tmp"
    mv "$copy.tmp" "$copy"
  fi
  mkdir -p "$work"
  cp "$mod/go.mod" "$work/go.mod"
  cp "$mod/go.sum" "$work/go.sum"
  go mod edit -modfile="$work/go.mod" -replace "knative.dev/pkg=$copy"
}

build_serving() {
  local dir=$BIN/knative-serving-$SERVING_VERSION-$PATCH
  [ -x "$dir/controller" ] && [ -x "$dir/webhook" ] && return 0
  log "building Knative Serving $SERVING_VERSION controller and webhook"
  local tmp work; tmp=$(mktemp -d "$CACHE/build-serving.XXXX"); work=$(mktemp -d)
  patched_modfile tools/knative-serving "$work"
  (
    cd tools/knative-serving
    go build -trimpath -modfile="$work/go.mod" -o "$tmp/" knative.dev/serving/cmd/controller knative.dev/serving/cmd/webhook
  )
  rm -rf "$work" "$dir" && mv "$tmp" "$dir"
}

build_eventing() {
  local dir=$BIN/knative-eventing-$EVENTING_VERSION-$PATCH
  [ -x "$dir/controller" ] && [ -x "$dir/webhook" ] && [ -x "$dir/apiserver_receive_adapter" ] && return 0
  log "building Knative Eventing $EVENTING_VERSION controller, webhook and receive adapter"
  local tmp work; tmp=$(mktemp -d "$CACHE/build-eventing.XXXX"); work=$(mktemp -d)
  patched_modfile tools/knative "$work"
  (
    cd tools/knative
    go build -trimpath -modfile="$work/go.mod" -o "$tmp/" knative.dev/eventing/cmd/controller knative.dev/eventing/cmd/webhook
    go build -trimpath -modfile="$work/go.mod" -o "$tmp/apiserver_receive_adapter" ./adapter
  )
  rm -rf "$work" "$dir" && mv "$tmp" "$dir"
}

build_eventing
build_serving
ln -sfn "knative-serving-$SERVING_VERSION-$PATCH" "$BIN/knative-serving"
ln -sfn "knative-eventing-$EVENTING_VERSION-$PATCH" "$BIN/knative-eventing"
echo "$BIN"
