#!/usr/bin/env bash
# Builds every fuzz target (release, libFuzzer, address sanitizer, coverage) and runs each for
# a while. New corpus entries are kept in Corpus/<target>/; crashes go to Findings/<target>/
# with a one-line command that reproduces them.
#
#   Fuzz/run.sh [--seconds N] [--runs N] [--jobs N] [--smoke] [target ...]
#
# --seconds N  time per target (default 60)
# --runs N     stop a target after N executions if that comes first
# --jobs N     targets fuzzed at once (default: one per CPU); each is one process on one core
# --smoke      CI mode: run on a copy of the corpus (the tree is left unchanged)
#
# The summary lines come at the end, in the order of the targets, whatever order they finish in.
set -euo pipefail
cd "$(dirname "$0")"
seconds=60
runs=-1
smoke=0
jobs=$(nproc 2>/dev/null || echo 1)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --smoke) smoke=1; shift ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(http1-response http1-chunked request-encoding url-request http2-frames tls-records redirect-location content-decoding auth-challenge set-cookie cache-headers socks-reply multipart-replace websocket-frames data-url)
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

swift build -c release --sanitize=fuzzer --sanitize=address \
  -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp

# fuzz_target TARGET SUMMARY: fuzzes one target, writes its summary (and, when it failed, its
# findings and the end of its log) to SUMMARY, and libFuzzer's exit status to SUMMARY.status.
fuzz_target() {
  local target=$1 summary=$2
  local binary=".build/release/fuzz-$target" corpus="Corpus/$target"
  mkdir -p "$corpus" "Findings/$target"
  local run_corpus="$corpus"
  if [ "$smoke" = 1 ]; then
    run_corpus=$(mktemp -d)
    cp -r "$corpus/." "$run_corpus/"
  fi
  local dictionary=()
  case "$target" in
    http1-*) dictionary=(-dict=Dictionaries/http1.dict) ;;
    auth-challenge) dictionary=(-dict=Dictionaries/auth-challenge.dict) ;;
    set-cookie) dictionary=(-dict=Dictionaries/set-cookie.dict) ;;
    cache-headers) dictionary=(-dict=Dictionaries/cache-headers.dict) ;;
  esac
  local log="Findings/$target/last-run.log" status
  set +e
  # Swift's backtracer would swallow the crash; libFuzzer must see it to write the input.
  # Leak detection is off: the Swift runtime's caches look like leaks; -rss_limit_mb bounds memory.
  SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 "$binary" "$run_corpus" "${dictionary[@]}" \
    -max_total_time="$seconds" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="Findings/$target/" -print_final_stats=1 > "$log" 2>&1
  status=$?
  set -e
  local executions coverage
  executions=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' || true)
  coverage=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'cov: [0-9]* ft: [0-9]*' || true)
  {
    echo "fuzz-$target: ${executions:-0} executions, ${coverage:-no coverage line}, exit $status"
    if [ "$status" != 0 ]; then
      for artifact in Findings/"$target"/crash-* Findings/"$target"/timeout-* Findings/"$target"/oom-*; do
        [ -e "$artifact" ] || continue
        echo "  finding: $artifact"
        echo "  reproduce: SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 Fuzz/$binary Fuzz/$artifact"
      done
      tail -20 "$log" | sed 's/^/  | /'
    fi
  } > "$summary"
  echo "$status" > "$summary.status"
  if [ "$smoke" = 1 ]; then rm -rf "$run_corpus"; fi
}

summaries=$(mktemp -d)
trap 'rm -rf "$summaries"' EXIT
# Up to $jobs targets at once.
for index in "${!targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_target "${targets[$index]}" "$summaries/$index" &
done
wait
failed=0
for index in "${!targets[@]}"; do
  if [ -f "$summaries/$index" ]; then
    cat "$summaries/$index"
  else
    echo "fuzz-${targets[$index]}: the runner ended before a summary, exit 1"
  fi
  [ "$(cat "$summaries/$index.status" 2>/dev/null || echo 1)" = 0 ] || failed=1
done
exit $failed
