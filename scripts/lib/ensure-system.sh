#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Courier's build, demo and tests need, when missing.
# Usage: ensure-system.sh build|test
set -euo pipefail

build_packages=(libssl-dev libnghttp2-dev zlib1g-dev libbrotli-dev libsqlite3-dev libpsl-dev publicsuffix pkg-config)
# squid (with its basic_ncsa_auth helper) is the HTTP proxy of the integration tests; curl is
# what courier is compared with (CLIDifferentialTests); util-linux's unshare makes the full
# file system of the full-disk tests.
test_packages=(nginx libnginx-mod-http-js nghttp2-server openssl squid curl util-linux)

wanted=("${build_packages[@]}")
if [ "${1:-build}" = "test" ]; then
  wanted+=("${test_packages[@]}")
  # httpbin and pproxy come from PyPI (below) for the python3 on PATH; Debian's python3 and
  # pip when there is none.
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    wanted+=(python3 python3-pip)
  fi
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
  # Debian starts nginx and squid as services when installed; the tests run their own
  # instances. Either may be missing, and systemctl too: neither stop may fail the script.
  if command -v service >/dev/null 2>&1; then
    $sudo service nginx stop >/dev/null 2>&1 || true
    $sudo service squid stop >/dev/null 2>&1 || true
  fi
  if command -v systemctl >/dev/null 2>&1; then $sudo systemctl stop squid >/dev/null 2>&1 || true; fi
fi

# httpbin (PyPI), served by waitress, the SOCKS5 proxy pproxy and the WebSocket server
# websockets (PyPI) for the integration tests: installed for the python3 on PATH, which is the
# interpreter the test harness runs (HttpbinServer.swift, SOCKSProxyServer.swift,
# WebSocketEchoServer.swift). As root into that Python; as another user pip
# falls back to a user install. Debian marks its Python as externally managed, and pip then
# refuses unless told to go ahead.
if [ "${1:-build}" = "test" ] && ! python3 -c 'import httpbin, waitress, pproxy, websockets.asyncio.server' >/dev/null 2>&1; then
  echo "Installing from PyPI: httpbin waitress pproxy websockets"
  pip_install=(python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location "httpbin>=0.10,<0.11" "waitress>=2.1" "pproxy>=2.7,<3" "websockets>=14,<18")
  export PIP_ROOT_USER_ACTION=ignore
  if ! pip_output=$("${pip_install[@]}" 2>&1); then
    if grep -q "externally-managed-environment" <<<"$pip_output"; then
      "${pip_install[@]}" --break-system-packages
    else
      echo "$pip_output" >&2
      exit 1
    fi
  fi
  if ! python3 -c 'import httpbin, waitress, pproxy, websockets.asyncio.server' >/dev/null 2>&1; then
    echo "httpbin, waitress, pproxy and websockets were installed but python3 cannot import them all" >&2
    exit 1
  fi
fi

if ! command -v swift >/dev/null 2>&1; then
  echo "Swift 6 is required: install it from https://www.swift.org/install/linux/ and put it on PATH." >&2
  exit 1
fi
