# Sourced by the test command and scripts/sanitize.sh: a run directory for the test servers'
# files (COURIER_TEST_RUN_DIR, which the test support reads, the XDG directories the default
# session's stores use: the tests get their own stores, never the user's, and TMPDIR), and the
# clean-up of servers a killed run left.
run_dir="$PWD/.test-run/$(date +%s)-$$"
mkdir -p "$run_dir"
export COURIER_TEST_RUN_DIR="$run_dir"
export XDG_DATA_HOME="$run_dir/xdg-data" XDG_CACHE_HOME="$run_dir/xdg-cache"
# The temporary directory of everything the run starts (SwiftPM, the tests, the programs they
# run, the background daemon): what any of them leaves there goes with the run directory.
export TMPDIR="$run_dir/tmp"
mkdir -p "$TMPDIR"
# At most 16 tests at once. Unbounded, Swift Testing starts every test of the suite together;
# on 2 loaded cores (CI, or a sanitizer's slowdown) some then waited minutes for a turn, and a
# keep-alive connection outlived its 60 s idle time between two requests of one test.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-16}"

# A background session's daemon stays 2 s after its last session left; a test's daemon goes
# after 0.2 s, so the background tests (which wait for it at their end) do not add up 2 s each.
export COURIER_BACKGROUND_IDLE_EXIT="${COURIER_BACKGROUND_IDLE_EXIT:-0.2}"

stop_leftovers() {
  find "$run_dir" -name server.pid 2>/dev/null | while read -r pidfile; do
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      sleep 0.2
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  # A killed squid leaves its shared-memory segments behind.
  find "$run_dir" -name shm.name 2>/dev/null | while read -r namefile; do
    rm -f /dev/shm/"$(cat "$namefile")"-* 2>/dev/null || true
  done
}
