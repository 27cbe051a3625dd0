#!/usr/bin/env bash
# The main job: build the `courier` command-line client and run it. With no arguments it starts
# a local demo server and fetches from it; any arguments are passed to courier (a URL, -v, -o…).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lib/ensure-system.sh build
swift build --product courier >&2
exec .build/debug/courier "$@"
