#!/usr/bin/env bash
# Builds Knative's programs from the Go module proxy into the cache directory that
# hack/testenv.sh uses, once per version:
#   - Serving's controller and webhook (go install at SERVING_VERSION);
#   - Eventing's controller and webhook, and the ApiServerSource receive adapter
#     (hack/tools/knative, a module that requires knative.dev/eventing at the version its go.mod
#     pins; `go install ...@version` cannot build Eventing).
# Prints the directory holding the binaries. Idempotent: nothing is built when they exist.
# About 6 minutes on 2 cores with an empty module cache.
set -euo pipefail
cd "$(dirname "$0")"

SERVING_VERSION=${SERVING_VERSION:-v0.50.0}
EVENTING_VERSION=$(cd tools/knative && go list -m -f '{{.Version}}' knative.dev/eventing)
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
mkdir -p "$BIN"

log() { echo "knative: $*" >&2; }

build_serving() {
  local dir=$BIN/knative-serving-$SERVING_VERSION
  [ -x "$dir/controller" ] && [ -x "$dir/webhook" ] && return 0
  log "building Knative Serving $SERVING_VERSION controller and webhook"
  local tmp; tmp=$(mktemp -d "$CACHE/build-serving.XXXX")
  GOBIN=$tmp go install "knative.dev/serving/cmd/controller@$SERVING_VERSION" "knative.dev/serving/cmd/webhook@$SERVING_VERSION"
  rm -rf "$dir" && mv "$tmp" "$dir"
}

build_eventing() {
  local dir=$BIN/knative-eventing-$EVENTING_VERSION
  [ -x "$dir/controller" ] && [ -x "$dir/webhook" ] && [ -x "$dir/apiserver_receive_adapter" ] && return 0
  log "building Knative Eventing $EVENTING_VERSION controller, webhook and receive adapter"
  local tmp; tmp=$(mktemp -d "$CACHE/build-eventing.XXXX")
  (
    cd tools/knative
    go build -o "$tmp/" knative.dev/eventing/cmd/controller knative.dev/eventing/cmd/webhook
    go build -o "$tmp/apiserver_receive_adapter" ./adapter
  )
  rm -rf "$dir" && mv "$tmp" "$dir"
}

build_eventing
build_serving
ln -sfn "knative-serving-$SERVING_VERSION" "$BIN/knative-serving"
ln -sfn "knative-eventing-$EVENTING_VERSION" "$BIN/knative-eventing"
echo "$BIN"
