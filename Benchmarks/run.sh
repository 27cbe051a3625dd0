#!/usr/bin/env bash
# The benchmark comparison in one command: installs the peers when missing (nginx, wrk,
# h2load, Go, curl, http-parser), builds the clients in release mode, and runs W1–W4, U1 and
# W3R against nginx (U1: upload_sink.py), and with --only WS the WebSocket echo (ws_echo_server.py),
# with Courier and its peers. Results go to
# Benchmarks/results/. Options are passed to run.py (--rounds N, --only W1,W3,U1,W3R, --quick).
set -euo pipefail
cd "$(dirname "$0")"
../scripts/lib/ensure-system.sh build
# The WS workloads' server and peer client are the websockets package (PyPI), which the test
# set-up installs.
python3 -c 'import websockets.sync.client, websockets.asyncio.server' >/dev/null 2>&1 || ../scripts/lib/ensure-system.sh test
need=()
for tool in /usr/bin/time:time nginx:nginx wrk:wrk h2load:nghttp2-client go:golang-go curl:curl taskset:util-linux; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
dpkg-query -W -f='${Status}' libhttp-parser-dev 2>/dev/null | grep -q "install ok installed" || need+=(libhttp-parser-dev)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" != "0" ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# foundation-bench is courier-bench with the import swapped: the same code.
mkdir -p Sources/FoundationBench
sed 's/^import Courier$/import FoundationNetworking/' Sources/CourierBench/main.swift > Sources/FoundationBench/main.swift
# SwiftPM can miss a source file added to the path dependency and keep an old build plan (the
# clients then measure stale code); planning afresh costs a second.
rm -f .build/release/description.json .build-static/release/description.json .build-lto/release/description.json
swift build -c release
# W3's Courier-static: courier-bench with the Swift runtime and Foundation linked statically.
swift build -c release --product courier-bench --static-swift-stdlib --scratch-path .build-static
# W1's and W2's Courier-lto: courier-bench with link-time optimisation across every module (the
# Swift ones and the C shims), as an application can build itself.
swift build -c release --product courier-bench --experimental-lto-mode=full --scratch-path .build-lto
# courier-load is a product of the main package.
(cd .. && swift build -c release --product courier-load)
mkdir -p bin
(cd peers/go && GOFLAGS=-mod=mod go build -o ../../bin/go-bench .)
exec python3 run.py "$@"
