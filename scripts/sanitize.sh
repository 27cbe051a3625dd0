#!/usr/bin/env bash
# The unit and integration suites under AddressSanitizer:
#
#   scripts/sanitize.sh              # build into .build-address, run every Swift test but the
#                                    # 256 MiB transfers, fail on any ASan report
#   scripts/sanitize.sh --filter X   # only the tests matching X (swift test --filter)
#
# Leak detection is off: at exit LeakSanitizer reports what is still alive on purpose (the shared
# test servers, a CLI's open connections when it calls exit), and it turns the exit status of
# every courier process the tests start into 1. Use-after-free, overflows and double frees are
# what this run is for.
#
# Not yet in the test command: a clean run takes about 6.5 minutes on 2 cores (a 3-minute build,
# 3.5 minutes of tests) and finds no AddressSanitizer report, but under its slowdown a full run
# fails a dozen tests that still lean on timing (cache stores, connection reuse, timers, a stream
# task's read timeout); those must stop depending on it first.
#
# ThreadSanitizer is not offered yet: Courier's locks are Synchronization.Mutex, which waits on
# futexes inside a standard library that is not built for TSan, so TSan sees none of the ordering
# those locks give and reports every guarded access (the event loops' inboxes first) as a race.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lib/ensure-system.sh test
. scripts/lib/test-run.sh
scratch=.build-address
filter=()
if [ "${1:-}" = "--filter" ]; then
  filter=(--filter "${2:?--filter needs a pattern}")
else
  filter=(--skip largeTransfers)
fi
swift build --build-tests --sanitize=address --scratch-path "$scratch"
log="$run_dir/sanitize.log"
# The servers' files go with a clean run; a failed one keeps them, with the log, for a look.
finish() {
  local code=$?
  stop_leftovers
  if [ "$code" = 0 ]; then
    rm -rf "$run_dir"
    rmdir "$PWD/.test-run" 2>/dev/null || true
  else
    echo "Logs and server files are kept in $run_dir"
  fi
  exit "$code"
}
trap finish EXIT
status=0
ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 \
  swift test --skip-build --sanitize=address --scratch-path "$scratch" "${filter[@]}" 2>&1 | tee "$log" || status=$?
reports=$(grep -c "ERROR: AddressSanitizer" "$log" || true)
echo "sanitize: ${reports} AddressSanitizer report(s); swift test exited with $status"
[ "$status" = 0 ] && [ "$reports" = 0 ]
