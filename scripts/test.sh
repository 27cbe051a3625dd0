#!/usr/bin/env bash
# The whole test suite: unit, transcript, reactor, pool and integration tests against real
# servers on loopback (nginx, nghttpd, a scripted raw server), then every fuzz target for 30
# seconds as a smoke test (fails on any crash). Installs what is missing first. Arguments, if
# any, go to `swift test` instead (e.g. --filter HTTP1), and the fuzz smoke run is skipped.
# Servers are started by the tests themselves and stopped by PID; anything left over after the
# run is stopped here from the PID files under .test-run/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lib/ensure-system.sh test

run_dir="$PWD/.test-run/$(date +%s)-$$"
mkdir -p "$run_dir"
export COURIER_TEST_RUN_DIR="$run_dir"

stop_leftovers() {
  find "$run_dir" -name server.pid 2>/dev/null | while read -r pidfile; do
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      sleep 0.2
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
}
trap stop_leftovers EXIT

swift build --build-tests
if [ $# -gt 0 ]; then
  swift test --skip-build "$@"
else
  # The 256 MiB transfers saturate an event loop of a debug build for seconds; they run on
  # their own afterwards so that their load cannot skew the timing-sensitive tests.
  swift test --skip-build --skip "largeTransfers"
  swift test --skip-build --filter "largeTransfers"
  # On a copy of the corpus: the smoke run leaves the tree as it found it.
  Fuzz/run.sh --seconds 30 --smoke
fi
