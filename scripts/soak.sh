#!/usr/bin/env bash
# The soak: builds courier-soak in release mode and runs it against nginx on loopback (started
# and stopped by it). Arguments go to courier-soak; without any it makes 1,000,000 requests,
# 64 in flight, over HTTP/1.1 and HTTP/2, with cancels, suspends and timeouts:
#
#   scripts/soak.sh                      # the full soak (about ten minutes on 2 cores)
#   scripts/soak.sh --requests 10000     # a short one
#
# It prints, per tenth of the run, the request rate and the resident memory, then whether every
# task completed exactly once, the open file descriptors before and after, and the download
# files left behind; it fails when a task was lost or doubled or a file was left.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lib/ensure-system.sh test >/dev/null
run_dir="$PWD/.test-run/soak-$$"
mkdir -p "$run_dir"
export COURIER_TEST_RUN_DIR="$run_dir"
cleanup() {
  find "$run_dir" -name server.pid 2>/dev/null | while read -r pidfile; do kill "$(cat "$pidfile")" 2>/dev/null || true; done
  rm -rf "$run_dir"
  rmdir "$PWD/.test-run" 2>/dev/null || true
}
trap cleanup EXIT
swift build -c release --product courier-soak >/dev/null 2>&1 || swift build -c release --target courier-soak
[ $# -eq 0 ] && set -- --requests 1000000
"$(swift build -c release --show-bin-path)/courier-soak" "$@"
