#!/usr/bin/env bash
# The whole test suite: unit, transcript, reactor, pool and integration tests against real
# servers on loopback (nginx, nghttpd, httpbin, squid, pproxy, a scripted raw server), all in
# an AddressSanitizer build (scripts/sanitize.sh: fails on any report), then a short soak and
# the Autobahn WebSocket cases on the same build, then every fuzz target for 5 seconds as a
# smoke test (fails on any crash), then the tests of the concurrent layers again under
# ThreadSanitizer. Installs what is missing first. Arguments, if any, go to `swift test` on a
# plain debug build instead (e.g. --filter HTTP1), and the other steps are skipped.
#
# Time on 2 cores from a fresh clone (CI's case; each step prints its time): the Swift builds
# are most of it, and the machine's speed varies up to two and a half times between runs. Two
# fresh runs took 2317 and 2685 s (the ASan build 641 and 698 s, its test run 347 and 419, the
# TSan build 456 and 603, its test run 304 and 263); a third, on a faster day, 985 s.
# Servers are started by the tests themselves and stopped by PID; anything left over after the
# run is stopped here from the PID files under .test-run/.
#
# Each step's output streams to the terminal and to a log in the run directory
# (.test-run/<time>-<pid>/). The last line is always `N passed, M failed`: every Swift Testing
# test of every `swift test` run, and each fuzz target as one test. A step that fails without
# naming a failed test (a build error, a crash) counts as one failure. As with `set -e`, the
# first failing step ends the run with its status. The run directory is removed when everything
# passed and kept, logs and all, when something failed.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/test-run.sh
passed=0
failed=0

finish() {
  local status=$?
  stop_leftovers
  if [ "$status" = 0 ] && [ "$failed" = 0 ]; then
    rm -rf "$run_dir"
    rmdir "$PWD/.test-run" 2>/dev/null || true
  else
    [ "$status" = 0 ] && status=1
    name_failures
    echo "Logs and server files are kept in $run_dir"
  fi
  echo "$passed passed, $failed failed"
  exit "$status"
}
trap finish EXIT

# What failed, gathered from every step's log at the end of a failed run, so that the last lines
# of the output (all CI shows) name it: Swift Testing's failure lines and the issues they
# recorded, the first 40 of them.
name_failures() {
  local lines
  lines=$(cat "$run_dir"/*.log 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' \
    | grep -E '^[^ ]+ Test .*( recorded an issue| failed after [0-9.]+ seconds?)' \
    | grep -vE '^[^ ]+ Test run with ' | cut -c1-400 | head -40 || true)
  if [ -n "$lines" ]; then
    echo "Failures:"
    echo "$lines"
  fi
}

# Swift Testing's counts, colours removed. The total comes from the run's own closing line
#   ✔ Test run with 521 tests in 42 suites passed after 14.8 seconds.
#   ✘ Test run with 521 tests in 42 suites failed after 14.8 seconds with 3 issues.
# (per-test lines can be garbled when a server child writes into the same output); the
# failures from the per-test lines
#   ✘ Test name() failed after 0.001 seconds with 1 issue.
# and at least one when the run says it failed. Passed is the total less the failures.
swift_run_total() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -oE 'Test run with [0-9]+ tests?' | awk '{sum += $4} END {print sum + 0}'
}

swift_failed_tests() {
  local log=$1 failed run_failed
  failed=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "^[^ ]+ Test .* failed after [0-9.]+ seconds?( with .*)?\.\$" \
    | grep -cvE '^[^ ]+ Test run with [0-9]+ tests? ' || true)
  run_failed=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -cE 'Test run with [0-9]+ tests? .* failed after' || true)
  if [ "$failed" = 0 ] && [ "$run_failed" != 0 ]; then failed=1; fi
  echo "$failed"
}

count_swift_tests() {
  local log=$1 outcome=$2 total failed
  failed=$(swift_failed_tests "$log")
  if [ "$outcome" = failed ]; then
    echo "$failed"
  else
    total=$(swift_run_total "$log")
    echo $((total > failed ? total - failed : 0))
  fi
}

# Fuzz/run.sh prints one line per target: "fuzz-<target>: …, exit <status>".
count_fuzz_targets() {
  local log=$1 outcome=$2
  if [ "$outcome" = passed ]; then
    grep -cE '^fuzz-[^:]+: .* exit 0$' "$log" || true
  else
    grep -E '^fuzz-[^:]+: .* exit [0-9]+$' "$log" | grep -cvE ' exit 0$' || true
  fi
}

# run_step NAME COUNTER COMMAND…: runs COMMAND with its output on the terminal and in
# NAME.log, adds what COUNTER (none, swift, fuzz, or one: the step is one test) finds to the
# totals, and ends the run when COMMAND fails.
run_step() {
  local name=$1 counter=$2
  shift 2
  local log="$run_dir/$name.log" status=0 step_passed=0 step_failed=0 started=$SECONDS
  "$@" 2>&1 | tee "$log" || status=$?
  # How long each step took, for keeping the whole run under its time budget.
  echo "step $name: $((SECONDS - started)) s"
  case "$counter" in
    swift)
      step_passed=$(count_swift_tests "$log" passed)
      step_failed=$(count_swift_tests "$log" failed)
      ;;
    fuzz)
      step_passed=$(count_fuzz_targets "$log" passed)
      step_failed=$(count_fuzz_targets "$log" failed)
      ;;
    one)
      if [ "$status" = 0 ]; then step_passed=1; else step_failed=1; fi
      ;;
  esac
  if [ "$status" != 0 ] && [ "$step_failed" = 0 ]; then step_failed=1; fi
  passed=$((passed + step_passed))
  failed=$((failed + step_failed))
  if [ "$status" != 0 ]; then
    echo "$name failed with status $status (log: $log)"
    exit "$status"
  fi
}

run_step ensure-system none scripts/lib/ensure-system.sh test
if [ $# -gt 0 ]; then
  run_step build none swift build --build-tests
  run_step test swift swift test --skip-build "$@"
else
  # Every Swift test under AddressSanitizer, whose build (.build-address) the later steps use
  # too: a debug build of its own as well would cost CI minutes and find nothing this one
  # does not. The 256 MiB transfers saturate an event loop of a debug build for seconds; they
  # run on their own afterwards so that their load cannot skew the timing-sensitive tests.
  run_step test swift scripts/sanitize.sh address
  run_step test-large-transfers swift scripts/sanitize.sh address --filter largeTransfers
  # A short soak, counted as one test: every task completes exactly once, no download file is
  # left (scripts/soak.sh runs the long one).
  run_step soak one scripts/soak.sh --sanitized address --requests 10000
  # Autobahn's WebSocket conformance cases outside permessage-deflate (301), counted as one
  # test: none FAILED (scripts/autobahn.sh alone runs all 517).
  run_step autobahn one scripts/autobahn.sh --sanitized address --skip-deflate
  # Parity with FoundationNetworking's public API, counted as one test: every public
  # declaration there has its counterpart here.
  run_step api-parity one scripts/api-parity.sh --sanitized address
  # On a copy of the corpus: the smoke run leaves the tree as it found it.
  run_step fuzz fuzz Fuzz/run.sh --seconds 5 --smoke
  # The tests of the concurrent layers again, in a ThreadSanitizer build: counted like the
  # first run, plus one failure when the sanitizer reported something that failed no test.
  run_step sanitize-thread swift scripts/sanitize.sh thread
fi
