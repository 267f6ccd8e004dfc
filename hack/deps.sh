#!/usr/bin/env bash
# Installs the Debian packages that tests, `make lint` (shellcheck, which actionlint runs on the
# workflows' scripts) and `make run` use. Idempotent and quick when they are there already.
set -euo pipefail
pkgs=(git make docker-registry shellcheck)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
