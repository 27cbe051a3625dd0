#!/usr/bin/env bash
# Which public declarations of the toolchain's FoundationNetworking the Courier module lacks:
# the "change one import" promise, measured. Both modules' symbol graphs are extracted with
# swift-symbolgraph-extract and compared by declaration path (`Type.member(label:)`); a path
# listed in scripts/api-parity-exclusions.txt (each with its reason after a '#') counts as
# present.
#
#   scripts/api-parity.sh [--list] [--report] [--sanitized address|thread]
#
# --list prints every missing path. --sanitized reads the module from that sanitizer's build
# (the test command's; see scripts/lib/sanitized-build.sh) instead of making a debug build.
# Exit status: 0 when nothing is missing, 1 when something is (0 with --report, which only
# tells), 2 when the graphs cannot be made.
set -uo pipefail
cd "$(dirname "$0")/.."
list=0 report=0
build_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=1 ;;
    --report) report=1 ;;
    --sanitized)
      . scripts/lib/sanitized-build.sh
      sanitized_build_args "${2:-}" || exit 2
      shift
      ;;
    *) echo "usage: scripts/api-parity.sh [--list] [--report] [--sanitized address|thread]" >&2; exit 2 ;;
  esac
  shift
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! swift build "${build_args[@]}" --target Courier >"$work/build.log" 2>&1; then
  grep -m5 'error:' "$work/build.log" >&2
  echo "api-parity: the Courier module does not build" >&2
  exit 2
fi
toolchain_lib="$(dirname "$(readlink -f "$(command -v swift)")")/../lib/swift/linux"
bin="$(swift build "${build_args[@]}" --show-bin-path)"
includes=()
for dir in Sources/C*/ Sources/C*/include; do [ -d "$dir" ] && includes+=(-I "$dir"); done
mkdir -p "$work/foundation" "$work/courier"
swift-symbolgraph-extract -module-name FoundationNetworking -target x86_64-unknown-linux-gnu -I "$toolchain_lib" \
  -output-dir "$work/foundation" -minimum-access-level public >"$work/foundation.log" 2>&1 \
  || { cat "$work/foundation.log" >&2; echo "api-parity: no symbol graph for FoundationNetworking" >&2; exit 2; }
swift-symbolgraph-extract -module-name Courier -target x86_64-unknown-linux-gnu -I "$bin/Modules" -I "$bin" "${includes[@]}" \
  -output-dir "$work/courier" -minimum-access-level public >"$work/courier.log" 2>&1 \
  || { cat "$work/courier.log" >&2; echo "api-parity: no symbol graph for Courier" >&2; exit 2; }
python3 - "$work/foundation/FoundationNetworking.symbols.json" "$work/courier/Courier.symbols.json" \
  scripts/api-parity-exclusions.txt "$list" <<'PY'
import collections, json, sys

def public_paths(path):
    with open(path) as graph:
        return {".".join(symbol["pathComponents"]) for symbol in json.load(graph)["symbols"]
                if symbol.get("accessLevel") in ("public", "open")}

wanted, have = public_paths(sys.argv[1]), public_paths(sys.argv[2])
excluded = set()
with open(sys.argv[3]) as exclusions:
    for line in exclusions:
        entry = line.split("#", 1)[0].strip()
        if entry:
            excluded.add(entry)
missing = sorted(p for p in wanted if p not in have and p not in excluded)
by_type = collections.Counter(p.split(".")[0] for p in missing)
present = len(wanted) - len(missing)
print(f"API parity: {present} of {len(wanted)} FoundationNetworking declarations in Courier "
      f"({100 * present / len(wanted):.1f}%), {len(excluded & wanted)} excluded")
for name, count in by_type.most_common():
    print(f"  {name}: {count} missing")
if sys.argv[4] == "1":
    for p in missing:
        print(f"  - {p}")
sys.exit(1 if missing else 0)
PY
status=$?
[ "$report" = 1 ] && [ "$status" = 1 ] && exit 0
exit "$status"
