#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy into a cache directory outside the
# repository, once per version. Both carry `replace` directives in their go.mod files, so neither
# can be `go install`ed: each is built from a throwaway module that requires it.
#
# Prints the directory holding the binaries. Idempotent: nothing is built when they exist.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${KUBE_VERSION#v1.}}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
CACHE=${REFLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reflector}
BIN=$CACHE/bin
mkdir -p "$BIN"

log() { echo "testenv: $*" >&2; }

build_apiserver() {
  local out=$BIN/kube-apiserver-$KUBE_VERSION
  [ -x "$out" ] && return 0
  local work; work=$(mktemp -d "$CACHE/build-apiserver.XXXX")
  log "building kube-apiserver $KUBE_VERSION (about 10 minutes on 2 cores)"
  (
    cd "$work"
    go mod init reflector.local/build-apiserver >/dev/null 2>&1
    go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
    local modfile
    modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    # Map every staging module that k8s.io/kubernetes replaces locally to its published version.
    for m in $(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
      go mod edit -replace="$m=$m@$STAGING_VERSION"
    done
    cat > main.go <<'GO'
package main

import "k8s.io/kubernetes/cmd/kube-apiserver/app"

import "os"

func main() {
	cmd := app.NewAPIServerCommand()
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
GO
    go mod tidy >/dev/null 2>&1 || go mod tidy
    go build -o "$out.tmp" .
    mv "$out.tmp" "$out"
  )
  rm -rf "$work"
}

build_etcd() {
  local out=$BIN/etcd-$ETCD_VERSION
  [ -x "$out" ] && return 0
  local work; work=$(mktemp -d "$CACHE/build-etcd.XXXX")
  log "building etcd $ETCD_VERSION"
  (
    cd "$work"
    go mod init reflector.local/build-etcd >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    local modfile
    modfile=$(go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    for m in $(sed -n 's#^\s*\(go.etcd.io/etcd/[a-z0-9/]*\) => \.\./.*#\1#p' "$modfile"); do
      go mod edit -replace="$m=$m@$ETCD_VERSION"
    done
    cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    go mod tidy >/dev/null 2>&1 || go mod tidy
    go build -o "$out.tmp" .
    mv "$out.tmp" "$out"
  )
  rm -rf "$work"
}

build_etcd
build_apiserver
ln -sf "kube-apiserver-$KUBE_VERSION" "$BIN/kube-apiserver"
ln -sf "etcd-$ETCD_VERSION" "$BIN/etcd"
echo "$BIN"
