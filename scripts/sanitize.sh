#!/usr/bin/env bash
# The Swift tests under AddressSanitizer and under ThreadSanitizer:
#
#   scripts/sanitize.sh                       # both, one after the other
#   scripts/sanitize.sh address               # one of them (address or thread)
#   scripts/sanitize.sh thread --filter X     # only the tests matching X (swift test --filter)
#
# Each builds into its own scratch path (.build-address, .build-thread; the arguments are in
# scripts/lib/sanitized-build.sh) and fails when a test fails or the sanitizer reports anything.
# The test command (scripts/test.sh) runs its Swift tests through this script: every test under
# AddressSanitizer, then the tests of the concurrent layers under ThreadSanitizer.
#
# AddressSanitizer runs every Swift test but the 256 MiB transfers (which the test command runs
# on their own afterwards, with --filter largeTransfers).
#
# ThreadSanitizer runs the tests that have threads in them: the reactor, the transport, the
# session layer, the integration and the switch-over suites. The test targets of the modules
# that are single-threaded by design, and whose tests start no thread (CourierCore,
# CourierHTTP1, CourierHTTP2, CourierTLS, CourierWebSocket, CourierPolicies, CourierPool: the
# codecs, the policies and the pool's state machine), are not even built there (Package.swift
# leaves them out when COURIER_TEST_TARGETS=concurrent, which scripts/lib/sanitized-build.sh
# sets for that build): ThreadSanitizer has nothing to look at in them, and under it they cost
# minutes of the run. They run under AddressSanitizer.
# The three full-disk tests are skipped too: under `unshare` with a 64 KiB tmpfs as TMPDIR, the
# TSan runtime of the child process dies of SIGBUS before main. They test ENOSPC handling, not
# threads.
#
# As in a plain run, at most 16 tests run at once (scripts/lib/test-run.sh). Unbounded, under
# a sanitizer's slowdown some tests waited minutes for a turn: 24 failed under ThreadSanitizer,
# none with the bound.
#
# AddressSanitizer: leak detection is off (see scripts/lib/sanitized-build.sh). Use-after-free,
# overflows and double frees are what this run is for.
#
# ThreadSanitizer: Courier's locks are CourierSync.Mutex, taken and given up by atomic operations
# TSan sees, and the event loop's HandoffMutex, which tells TSan when it is taken and given up
# (Synchronization's Mutex under it can be handed over by the kernel, where TSan cannot see it).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=(address thread)
case "${1:-}" in
  address|thread) sanitizers=("$1"); shift ;;
esac
filter=()
if [ "${1:-}" = "--filter" ]; then
  filter=(--filter "${2:?--filter needs a pattern}")
fi
scripts/lib/ensure-system.sh test
. scripts/lib/test-run.sh
. scripts/lib/sanitized-build.sh
# The servers' files go with a clean run; a failed one keeps them, with the logs, for a look.
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
failed=0
for sanitizer in "${sanitizers[@]}"; do
  sanitized_build_args "$sanitizer"
  selection=("${filter[@]}")
  if [ ${#selection[@]} = 0 ]; then
    selection=(--skip largeTransfers)
    [ "$sanitizer" = thread ] && selection=(--skip "largeTransfers|fullDisk")
  fi
  swift build --build-tests "${build_args[@]}"
  log="$run_dir/sanitize-$sanitizer.log"
  status=0
  swift test --skip-build "${build_args[@]}" "${selection[@]}" 2>&1 | tee "$log" || status=$?
  reports=$(grep -cE "ERROR: AddressSanitizer|WARNING: ThreadSanitizer|ERROR: ThreadSanitizer" "$log" || true)
  echo "sanitize $sanitizer: $reports report(s); swift test exited with $status"
  if [ "$status" != 0 ] || [ "$reports" != 0 ]; then failed=1; fi
done
exit "$failed"
