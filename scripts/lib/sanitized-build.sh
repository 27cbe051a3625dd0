# Sourced by the scripts that use a sanitized build (scripts/sanitize.sh, and soak.sh,
# autobahn.sh and api-parity.sh with --sanitized): the one set of arguments that makes or
# finds each build, so that a script that only needs what the test command built finds it
# built instead of starting a build of its own.
#
#   sanitized_build_args address|thread   # fills the array build_args and sets build_scratch
#
# Each sanitizer has its own scratch path (.build-address, .build-thread). Line tables only
# (-gline-tables-only) instead of full debug information made no difference that stood out of
# this machine's noise: clean AddressSanitizer builds of 588 and 641 s with it against 416 and
# 503 s without, ThreadSanitizer 456 and 478 s with it against 599 s without.
sanitized_build_args() {
  case "$1" in
    address|thread) ;;
    *) echo "unknown sanitizer: $1 (address or thread)" >&2; return 2 ;;
  esac
  build_scratch=".build-$1"
  build_args=(--sanitize="$1" --scratch-path "$build_scratch")
  # The ThreadSanitizer build leaves out the test targets of the single-threaded modules
  # (Package.swift); every command on that build must see the same package.
  if [ "$1" = thread ]; then
    export COURIER_TEST_TARGETS=concurrent
  else
    unset COURIER_TEST_TARGETS
  fi
}

# What a sanitized program needs in its environment. AddressSanitizer's leak check is off: at
# exit it reports what is alive on purpose (shared test servers, a CLI's open connections when
# it calls exit) and turns every such exit status into 1.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0}"
