#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Courier's build, demo and tests need, when missing.
# Usage: ensure-system.sh build|test
set -euo pipefail

build_packages=(libssl-dev libnghttp2-dev zlib1g-dev libbrotli-dev pkg-config)
test_packages=(nginx libnginx-mod-http-js nghttp2-server openssl)

wanted=("${build_packages[@]}")
if [ "${1:-build}" = "test" ]; then
  wanted+=("${test_packages[@]}")
fi

missing=()
for package in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts nginx as a service when installed; the tests run their own instances.
  if command -v service >/dev/null 2>&1; then $sudo service nginx stop >/dev/null 2>&1 || true; fi
fi

if ! command -v swift >/dev/null 2>&1; then
  echo "Swift 6 is required: install it from https://www.swift.org/install/linux/ and put it on PATH." >&2
  exit 1
fi
