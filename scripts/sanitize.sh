#!/usr/bin/env bash
# The unit and integration suites under AddressSanitizer and under ThreadSanitizer:
#
#   scripts/sanitize.sh                       # both, one after the other
#   scripts/sanitize.sh address               # one of them (address or thread)
#   scripts/sanitize.sh thread --filter X     # only the tests matching X (swift test --filter)
#
# Each builds into its own scratch path (.build-address, .build-thread), runs every Swift test but
# the 256 MiB transfers, and fails when a test fails or the sanitizer reports anything. The test
# command (scripts/test.sh) runs both as its last steps.
#
# As in the plain run, at most 16 tests run at once (scripts/lib/test-run.sh). Unbounded, under
# a sanitizer's slowdown some tests waited minutes for a turn: 24 failed under ThreadSanitizer,
# none with the bound.
#
# AddressSanitizer: leak detection is off. At exit LeakSanitizer reports what is still alive on
# purpose (the shared test servers, a CLI's open connections when it calls exit), and it turns
# the exit status of every courier process the tests start into 1. Use-after-free, overflows
# and double frees are what this run is for.
#
# ThreadSanitizer: Courier's locks are CourierSync.Mutex, which tells TSan when it is taken and
# given up (Synchronization's own Mutex waits in the kernel, where TSan cannot see it). The three
# full-disk tests are skipped: under `unshare` with a 64 KiB tmpfs as TMPDIR, the TSan runtime of
# the child process dies of SIGBUS before main. They test ENOSPC handling, not threads, and run
# in the plain and the ASan suites.
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
  scratch=".build-$sanitizer"
  selection=("${filter[@]}")
  if [ ${#selection[@]} = 0 ]; then
    selection=(--skip largeTransfers)
    [ "$sanitizer" = thread ] && selection=(--skip "largeTransfers|fullDisk")
  fi
  swift build --build-tests --sanitize="$sanitizer" --scratch-path "$scratch"
  log="$run_dir/sanitize-$sanitizer.log"
  status=0
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 TSAN_OPTIONS=halt_on_error=0 \
    swift test --skip-build --sanitize="$sanitizer" --scratch-path "$scratch" "${selection[@]}" 2>&1 | tee "$log" || status=$?
  reports=$(grep -cE "ERROR: AddressSanitizer|WARNING: ThreadSanitizer|ERROR: ThreadSanitizer" "$log" || true)
  echo "sanitize $sanitizer: $reports report(s); swift test exited with $status"
  if [ "$status" != 0 ] || [ "$reports" != 0 ]; then failed=1; fi
done
exit "$failed"
