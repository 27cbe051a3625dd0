#!/usr/bin/env bash
# The soak: builds courier-soak in release mode and runs it against nginx on loopback (started
# and stopped by it). Arguments go to courier-soak; without any it makes 1,000,000 requests,
# 64 in flight, over HTTP/1.1 and HTTP/2, with cancels, suspends and timeouts:
#
#   scripts/soak.sh                      # the full soak (about ten minutes on 2 cores)
#   scripts/soak.sh --requests 10000     # a short one
#   scripts/soak.sh --debug --requests 10000   # on the debug build
#   scripts/soak.sh --lto --requests 100000     # on a release build with full LTO (.build-lto),
#                                        # the build the benchmarks' Courier-lto rows measure
#   scripts/soak.sh --sanitized address --requests 10000   # the test command's: on its
#                                        # AddressSanitizer build (scripts/lib/sanitized-build.sh)
#
# It prints, per tenth of the run, the request rate, the resident memory and the process's CPU
# time a request (a cost that grew with the run would rise tenth after tenth), then whether every
# task completed exactly once, the open file descriptors before and after, and the download
# files left behind; it fails when a task was lost or doubled or a file was left.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lib/ensure-system.sh test >/dev/null
run_dir="$PWD/.test-run/soak-$$"
mkdir -p "$run_dir"
export COURIER_TEST_RUN_DIR="$run_dir"
# The shared cookie and cache stores go to the run directory, never the user's.
export XDG_DATA_HOME="$run_dir/xdg-data" XDG_CACHE_HOME="$run_dir/xdg-cache"
cleanup() {
  find "$run_dir" -name server.pid 2>/dev/null | while read -r pidfile; do kill "$(cat "$pidfile")" 2>/dev/null || true; done
  rm -rf "$run_dir"
  rmdir "$PWD/.test-run" 2>/dev/null || true
}
trap cleanup EXIT
# --debug: the debug build; --lto: release with link-time optimisation across every module, in a
# build directory of its own; --sanitized address|thread: that sanitizer's build, which the test
# command already made (a short soak there); else release.
build_args=(-c release)
case "${1:-}" in
  --debug) build_args=(-c debug); shift ;;
  --lto) build_args=(-c release --experimental-lto-mode=full --scratch-path .build-lto); shift ;;
  --sanitized)
    . scripts/lib/sanitized-build.sh
    sanitized_build_args "${2:?--sanitized needs address or thread}"
    shift 2
    ;;
esac
swift build "${build_args[@]}" --product courier-soak >/dev/null
[ $# -eq 0 ] && set -- --requests 1000000
"$(swift build "${build_args[@]}" --show-bin-path)/courier-soak" "$@"
