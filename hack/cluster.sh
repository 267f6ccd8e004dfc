#!/usr/bin/env bash
# Builds what a single-node cluster needs beyond hack/testenv.sh's etcd and kube-apiserver, into
# the same cache directory, once per version:
#   - kubelet, kube-proxy, kube-scheduler, kube-controller-manager and kubectl from
#     k8s.io/kubernetes (a throwaway module that requires it and maps every staging module it
#     replaces locally to the published v0.x version, as hack/testenv.sh does; the programs are
#     built from their own main packages, with the version stamped in);
#   - CoreDNS (go install: its go.mod has no replace);
#   - Traefik, the KIngress (its Knative provider). Its go.mod replaces three modules in ways the
#     Go module proxy cannot follow, so it is built from a throwaway module with these instead:
#       * github.com/traefik/traefik/dynamic/ext, a nested module missing from Traefik's module
#         zip, is written here: a go.mod and the two empty types (HTTP, Router) that
#         pkg/config/dynamic embeds inline, which is what the open-source build has there;
#       * github.com/abbot/go-http-auth points at the fork's pseudo-version that the proxy serves
#         ($HTTP_AUTH_VERSION), not at the one Traefik pins;
#       * github.com/go-acme/lego/v5 is a copy whose providers/dns/zz_gen_dns_providers.go leaves
#         out the DNS providers whose SDKs the proxy refuses ($LEGO_DROP), so that no package
#         imports them; no other file is changed, and no Traefik file at all;
#   - pause, the sandbox's program (Kubernetes' build/pause/linux/pause.c, compiled statically as
#     its Makefile does); the cluster test makes the pause image, a base image for static programs
#     and CoreDNS's image from the binaries with go-containerregistry (internal/node);
#   - the Debian packages the node runs: containerd, runc, containernetworking-plugins, iptables,
#     iproute2 (apt-get update first; skipped when all are installed).
#   - Knative's images (hack/knative-images): `ko resolve` of the release configurations of
#     knative.dev/serving (config/core) and knative.dev/eventing (config/core, the in-memory
#     channel, the multi-tenant channel-based broker) at the versions hack/tools pins, onto the
#     node's base image, kept as an OCI layout with the resolved manifests; the cluster test
#     pushes them into the node's registry. These are Knative's own programs, unpatched (the
#     host-side builds of hack/knative.sh carry a probe-port and listen-address overlay that pods
#     do not need);
#   - kube-apiserver again, with its version stamped as the other programs are: Knative's
#     programs refuse an apiserver whose version is not semver, and testenv's reports
#     "v0.0.0-master+$Format:%H$". The packages are testenv's, so this is mostly a link.
#
# Prints the directory holding the binaries. Idempotent: nothing is built when it exists.
# `./hack/cluster.sh PART` builds one part (debs, pause, coredns, kube, traefik) and logs its time.
# Measured on 2 cores shared with other builds (load 12 to 36), empty build cache: debs 93 s,
# kube 4783 s (kubelet 4171 s beside a kube-apiserver build, then kube-proxy 126 s,
# kube-scheduler 50 s, kube-controller-manager 234 s, kubectl 145 s), coredns 2392 s,
# traefik 5794 s (about 26 minutes of it stopped to leave the cores to kube), pause under 1 s;
# docs/development.md ("A real node") has the details.
set -euo pipefail
cd "$(dirname "$0")"

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${KUBE_VERSION#v1.}}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
TRAEFIK_VERSION=${TRAEFIK_VERSION:-v3.7.13}
LEGO_VERSION=${LEGO_VERSION:-v5.4.1}
HTTP_AUTH_VERSION=${HTTP_AUTH_VERSION:-v0.4.1-0.20200324110947-a37a7636d23e}
LEGO_DROP="alidns aliesa azion dnsimple edgedns edgeone huaweicloud oraclecloud regfish sakuracloud tencentcloud ucloud yandexcloud"
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
mkdir -p "$BIN"

log() { echo "cluster: $*" >&2; }

# timed NAME CMD... runs CMD and logs how long it took.
timed() {
  local name=$1 start; shift
  start=$(date +%s)
  "$@"
  log "$name took $(($(date +%s) - start)) s"
}

# moddir MODULE@VERSION prints the module's directory in the module cache, downloading it first.
moddir() {
  go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'
}

# trimmed_lego writes (once) a copy of lego whose generated provider list leaves out $LEGO_DROP,
# and prints its directory.
trimmed_lego() {
  local src copy drop
  drop=$(echo "$LEGO_DROP" | sha256sum | cut -c1-8)
  copy=$CACHE/src/lego-$LEGO_VERSION-$drop
  if [ ! -d "$copy" ]; then
    src=$(moddir "github.com/go-acme/lego/v5@$LEGO_VERSION")
    rm -rf "$copy.tmp" && mkdir -p "$CACHE/src"
    cp -r "$src" "$copy.tmp" && chmod -R u+w "$copy.tmp"
    local f=$copy.tmp/providers/dns/zz_gen_dns_providers.go
    # Drop each import of a listed provider, and each `case "name"...:` whose first name is listed
    # together with the return line after it.
    awk -v drop="$LEGO_DROP" '
      BEGIN { n = split(drop, d, " "); for (i = 1; i <= n; i++) skip[d[i]] = 1 }
      skipnext { skipnext = 0; next }
      match($0, /providers\/dns\/[a-z0-9]+"$/) {
        name = substr($0, RSTART + 14, RLENGTH - 15)
        if (name in skip) { dropped[name]++; next }
      }
      match($0, /^\tcase "[a-z0-9]+"/) {
        name = substr($0, RSTART + 7, RLENGTH - 8)
        if (name in skip) { dropped[name]++; skipnext = 1; next }
      }
      { print }
      END { for (k in skip) if (dropped[k] != 2) { print "lego: " k " found " dropped[k]+0 " times, not twice" > "/dev/stderr"; exit 1 } }
    ' "$f" >"$f.new"
    mv "$f.new" "$f"
    gofmt -l "$f" >/dev/null
    mv "$copy.tmp" "$copy"
  fi
  echo "$copy"
}

build_traefik() {
  local out=$BIN/traefik-$TRAEFIK_VERSION
  [ -x "$out" ] && return 0
  log "building Traefik $TRAEFIK_VERSION"
  local src lego work
  src=$(moddir "github.com/traefik/traefik/v3@$TRAEFIK_VERSION")
  lego=$(trimmed_lego)
  work=$(mktemp -d "$CACHE/build-traefik.XXXX")
  (
    cd "$work"
    # Traefik's own requirements and excludes, so that the build selects the versions it tested.
    sed "s#^module .*#module reflector.local/build-traefik#" "$src/go.mod" >go.mod
    cp "$src/go.sum" go.sum && chmod u+w go.mod go.sum
    go mod edit -require="github.com/traefik/traefik/v3@$TRAEFIK_VERSION"
    mkdir -p ext
    cat >ext/go.mod <<'MOD'
module github.com/traefik/traefik/dynamic/ext

go 1.24
MOD
    cat >ext/ext.go <<'GO'
// Package ext holds the extension points of Traefik's dynamic configuration, which the
// open-source build leaves empty.
package ext

// HTTP extends dynamic.HTTPConfiguration.
type HTTP struct{}

// Router extends dynamic.Router.
type Router struct{}
GO
    go mod edit -replace="github.com/traefik/traefik/dynamic/ext=$work/ext" \
      -replace="github.com/abbot/go-http-auth=github.com/containous/go-http-auth@$HTTP_AUTH_VERSION" \
      -replace="github.com/go-acme/lego/v5=$lego"
    go build -mod=mod -trimpath \
      -ldflags "-X github.com/traefik/traefik/v3/pkg/version.Version=$TRAEFIK_VERSION" \
      -o "$out.tmp" github.com/traefik/traefik/v3/cmd/traefik
    mv "$out.tmp" "$out"
  )
  rm -rf "$work"
}

KUBE_CMDS="kubelet kube-proxy kube-scheduler kube-controller-manager kubectl kube-apiserver"

build_kube() {
  local dir=$BIN/kube-node-$KUBE_VERSION c missing=
  for c in $KUBE_CMDS; do [ -x "$dir/$c" ] || missing=1; done
  [ -z "$missing" ] && return 0
  log "building $KUBE_CMDS $KUBE_VERSION"
  local work tmp; work=$(mktemp -d "$CACHE/build-kube.XXXX"); tmp=$work/out
  (
    cd "$work"
    go mod init reflector.local/build-kube >/dev/null 2>&1
    go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
    local modfile m
    modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    for m in $(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
      go mod edit -replace="$m=$m@$STAGING_VERSION"
    done
    # The programs' main packages, built as they are; tidy needs an importing file to keep the
    # requirement.
    { echo '//go:build tools'; echo; echo 'package tools'; echo; echo 'import ('
      for c in $KUBE_CMDS; do echo "	_ \"k8s.io/kubernetes/cmd/$c/app\""; done
      echo ')'; } >tools.go
    sed -i 's#k8s.io/kubernetes/cmd/kubectl/app#k8s.io/kubectl/pkg/cmd#' tools.go
    go mod tidy >/dev/null 2>&1 || go mod tidy
    local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
    local v=k8s.io/component-base/version
    local ld="-X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    mkdir -p "$tmp"
    for c in $KUBE_CMDS; do
      timed "$c" go build -ldflags "$ld" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c"
    done
  )
  rm -rf "$dir" && mv "$tmp" "$dir" && rm -rf "$work"
}

# build_knative_images builds Knative's data-plane images once per version of Serving, Eventing,
# ko and the builder, with a throwaway copy of each hack/tools module (ko may need to add the
# requirements of programs that the host-side builds do not link).
build_knative_images() {
  local root serving eventing ko key out work s e n c
  root=$(cd .. && pwd)
  serving=$(cd tools/knative-serving && go list -m -f '{{.Version}}' knative.dev/serving)
  eventing=$(cd tools/knative && go list -m -f '{{.Version}}' knative.dev/eventing)
  # Eventing's release adds the integrations' and transformations' image ConfigMaps that its
  # controller mounts, from third_party/ (hack/release.sh). Serving's release also takes the CRDs of networking's Ingresses, Certificates and
  # ServerlessServices, config-network, and the caching Image CRD, from the modules it requires
  # (symbolic links in its repository, which module zips leave out).
  (cd tools/knative-serving && go mod download knative.dev/serving knative.dev/networking knative.dev/caching)
  (cd tools/knative && go mod download knative.dev/eventing)
  s=$(cd tools/knative-serving && go list -m -f '{{.Dir}}' knative.dev/serving)
  n=$(cd tools/knative-serving && go list -m -f '{{.Dir}}' knative.dev/networking)
  c=$(cd tools/knative-serving && go list -m -f '{{.Dir}}' knative.dev/caching)
  e=$(cd tools/knative && go list -m -f '{{.Dir}}' knative.dev/eventing)
  work=$CACHE/build-knative-images
  local specs=(
    "serving=$work/knative-serving:$s/config/core,$n/config,$c/config"
    "eventing=$work/knative:$e/config/core,$e/third_party/eventing-integrations-latest"
    "in-memory-channel=$work/knative:$e/config/channels/in-memory-channel"
    "mt-channel-broker=$work/knative:$e/config/brokers/mt-channel-broker"
  )
  make -s -C .. ko >/dev/null
  ko=$root/bin/ko
  # The builder, ko, what is built and the base image (BaseImage of internal/node).
  local base; base=$(cd .. && go run ./hack/knative-images -print-base)
  key=$( (cat knative-images/main.go; "$ko" version; printf '%s\n' "${specs[@]}" "$base") | sha256sum | cut -c1-8)
  out=$BIN/knative-images-$serving-$eventing-$key
  if [ ! -d "$out" ]; then
    log "building Knative's images (Serving $serving, Eventing $eventing)"
    rm -rf "$work"
    local m
    for m in knative-serving knative; do
      mkdir -p "$work/$m" && cp tools/$m/go.mod tools/$m/go.sum tools/$m/tools.go "$work/$m/"
    done
    (cd .. && go run ./hack/knative-images -out "$out" -ko "$ko" "${specs[@]}")
    rm -rf "$work"
    # Earlier builds (about 600 MB each).
    local old
    for old in "$BIN"/knative-images-*; do
      [ "$old" = "$out" ] || rm -rf "$old"
    done
  fi
  ln -sfn "$(basename "$out")" "$BIN/knative-images"
}

build_coredns() {
  local out=$BIN/coredns-$COREDNS_VERSION
  [ -x "$out" ] && return 0
  log "building CoreDNS $COREDNS_VERSION"
  local work; work=$(mktemp -d "$CACHE/build-coredns.XXXX")
  # Static, so that it runs on an empty base image.
  CGO_ENABLED=0 GOBIN=$work go install -trimpath "github.com/coredns/coredns@$COREDNS_VERSION"
  mv "$work/coredns" "$out" && rm -rf "$work"
}

# build_pause compiles Kubernetes' pause program (the sandbox's process), statically, as its
# Makefile does; the cluster test puts it in an image.
build_pause() {
  local kube tag out
  kube=$(moddir "k8s.io/kubernetes@$KUBE_VERSION")
  tag=$(sed -n 's/^TAG ?= \(.*\)/\1/p' "$kube/build/pause/Makefile")
  [ -n "$tag" ] || { log "no TAG in $kube/build/pause/Makefile"; return 1; }
  out=$BIN/pause-$tag
  if [ ! -x "$out" ]; then
    gcc -Os -Wall -Werror -static -DVERSION="v$tag" -o "$out.tmp" "$kube/build/pause/linux/pause.c"
    strip "$out.tmp" && mv "$out.tmp" "$out"
  fi
  ln -sfn "pause-$tag" "$BIN/pause"
}

install_debs() {
  local pkgs="containerd runc containernetworking-plugins iptables iproute2" p missing=
  for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  [ -z "$missing" ] && return 0
  log "installing$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  # The node's containerd is started by the cluster test with its own configuration, not by the
  # package's service.
  systemctl disable --now containerd >/dev/null 2>&1 || true
}

what=${1:-all}
case $what in
  traefik) timed traefik build_traefik ;;
  kube) timed kube build_kube ;;
  coredns) timed coredns build_coredns ;;
  pause) build_pause ;;
  debs) install_debs ;;
  knative-images) timed knative-images build_knative_images ;;
  all)
    install_debs
    build_pause
    timed coredns build_coredns
    timed kube build_kube
    timed traefik build_traefik
    timed knative-images build_knative_images
    ;;
  *) log "unknown part $what (traefik, kube, coredns, pause, debs, knative-images, all)"; exit 2 ;;
esac
if [ -d "$BIN/kube-node-$KUBE_VERSION" ]; then ln -sfn "kube-node-$KUBE_VERSION" "$BIN/kube-node"; fi
if [ -x "$BIN/traefik-$TRAEFIK_VERSION" ]; then ln -sfn "traefik-$TRAEFIK_VERSION" "$BIN/traefik"; fi
if [ -x "$BIN/coredns-$COREDNS_VERSION" ]; then ln -sfn "coredns-$COREDNS_VERSION" "$BIN/coredns"; fi
echo "$BIN"
