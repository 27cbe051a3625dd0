#!/usr/bin/env bash
# The Autobahn WebSocket conformance suite against Courier's URLSessionWebSocketTask. Autobahn's
# `wstest -m fuzzingserver` plays the server side of every case; courier-autobahn
# (Tests/CourierAutobahn) is the client, which echoes what each case sends. The server judges
# each case and writes its reports to .build/autobahn-reports/ (index.html to read in a browser,
# index.json, and server.log and client.log from the run); this script then prints, per case
# group (the first number of a case's id), how many cases behaved OK, NON-STRICT, INFORMATIONAL,
# UNIMPLEMENTED or FAILED, and how many failed their closing handshake:
#
#   scripts/autobahn.sh                      # every case (the 517 take about 45 minutes)
#   scripts/autobahn.sh --cases "1.*,2.*"    # only these (Autobahn's id patterns, comma-separated)
#   scripts/autobahn.sh --skip-deflate       # leave out 12.* and 13.* (301 cases, under a minute)
#   scripts/autobahn.sh --build              # rebuild courier-autobahn first (else built only when missing)
#   scripts/autobahn.sh --debug              # the debug build of courier-autobahn
#   scripts/autobahn.sh --sanitized address  # its AddressSanitizer build (the test command's; see
#                                            # scripts/lib/sanitized-build.sh)
#   scripts/autobahn.sh --timeout 300        # seconds before the client gives up on a case (120)
#
# Nearly all the time goes to the 216 permessage-deflate cases: each sends 1000 messages (of up
# to 128 KiB), which the Python server compresses and logs. The run fails (exit 1) when any case
# FAILED (Courier implements permessage-deflate, so 12.* and 13.* count like the rest; they are
# listed apart), when a closing handshake FAILED, when cases are missing from the report, or when
# the client or the server did not finish. COURIER_AUTOBAHN_CLIENT names a client binary to run
# instead of the release build (`swift build -c release --product courier-autobahn`, which this
# script runs when the binary is missing).
#
# wstest is Python 2.7 code (PyPI's autobahntestsuite). It is installed, with every dependency
# pinned, into a virtualenv at .build/autobahn-venv, made from a Python 2.7 that pyenv provides
# (or AUTOBAHN_PYTHON2); a second run reuses it. wstest binds its listening sockets to every
# interface whatever the spec's URL says, so it is started through a small launcher that pins
# Twisted's listenTCP to 127.0.0.1, with its web UI (port 8080 by default) turned off, and the
# script checks with ss that the port is bound to loopback only before the client connects.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

patterns="*"
skip_deflate=0
rebuild=0
configuration=release
sanitizer=""
timeout=120
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) patterns="${2:?--cases needs a pattern list}"; shift 2 ;;
    --cases=*) patterns="${1#--cases=}"; shift ;;
    --skip-deflate) skip_deflate=1; shift ;;
    --build) rebuild=1; shift ;;
    --debug) configuration=debug; shift ;;
    --sanitized) sanitizer="${2:?--sanitized needs address or thread}"; configuration=debug; shift 2 ;;
    --timeout) timeout="${2:?--timeout needs seconds}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "autobahn.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

venv="$root/.build/autobahn-venv"
tools="$root/.build/autobahn-tools"
reports="$root/.build/autobahn-reports"
agent="Courier"

# Every package of the virtualenv, pinned: autobahntestsuite 25.10.1 pins its direct
# dependencies exactly (Twisted 19.10.0, autobahn 0.10.9, txaio 2.1.0, ...); the rest are the
# last releases that still install on Python 2.7. wsaccel (autobahn's "accelerate" extra) masks
# and validates UTF-8 in C: without it the 16 MiB cases of group 9 take minutes in Python.
requirements='autobahntestsuite==25.10.1
autobahn[twisted,accelerate]==0.10.9
Twisted==19.10.0
txaio==2.1.0
incremental==16.10.1
zope.interface==4.6.0
six==1.16.0
setuptools==44.0.0
pyOpenSSL==19.1.0
cryptography==3.3.2
service-identity==18.1.0
klein==17.10.0
Werkzeug==1.0.1
Jinja2==2.11.3
MarkupSafe==1.1.1
unittest2==1.1.0
wsaccel==0.6.3
ujson==1.35
attrs==21.4.0
Automat==22.10.0
constantly==15.1.0
hyperlink==21.0.0
idna==2.10
typing==3.10.0.0
PyHamcrest==1.10.1
cffi==1.15.1
pycparser==2.21
enum34==1.1.10
ipaddress==1.0.23
pyasn1==0.5.1
pyasn1-modules==0.3.0
linecache2==1.0.0
traceback2==1.4.0
argparse==1.4.0'

# virtualenv itself, run by the Python 2.7 (which has no venv module): 20.15.1 is the last
# release that runs on 2.7, and it carries pip, setuptools and wheel for 2.7 inside it.
virtualenv_requirements='virtualenv==20.15.1
distlib==0.4.4
filelock==3.2.1
platformdirs==2.0.2
six==1.17.0
importlib-metadata==2.1.3
importlib-resources==3.3.1
zipp==1.2.0
pathlib2==2.3.7.post1
scandir==1.10.0
contextlib2==0.6.0.post1
configparser==4.0.2
singledispatch==3.7.0
typing==3.10.0.0'

# A Python 2.7: AUTOBAHN_PYTHON2, else the newest 2.7 pyenv has, else python2.7 on PATH.
find_python2() {
  local candidate
  if [ -n "${AUTOBAHN_PYTHON2:-}" ]; then
    echo "$AUTOBAHN_PYTHON2"
    return
  fi
  if command -v pyenv >/dev/null 2>&1; then
    candidate=$(pyenv versions --bare 2>/dev/null | grep -E '^2\.7(\.[0-9]+)?$' | sort -t. -k3 -n | tail -1 || true)
    if [ -n "$candidate" ] && [ -x "$(pyenv root)/versions/$candidate/bin/python2.7" ]; then
      echo "$(pyenv root)/versions/$candidate/bin/python2.7"
      return
    fi
  fi
  command -v python2.7 || true
}

ensure_venv() {
  if [ -x "$venv/bin/wstest" ] && [ "$(cat "$venv/courier-requirements.txt" 2>/dev/null)" = "$requirements" ]; then
    return
  fi
  local python2 log
  python2=$(find_python2)
  if [ -z "$python2" ] || ! "$python2" -c 'import sys; sys.exit(sys.version_info[:2] != (2, 7))' 2>/dev/null; then
    echo "autobahn.sh: wstest needs Python 2.7 and none was found: set AUTOBAHN_PYTHON2, or install one with pyenv (pyenv install 2.7.18)" >&2
    exit 1
  fi
  # wsaccel, ujson and zope.interface are compiled on install.
  if ! command -v gcc >/dev/null 2>&1; then
    echo "Installing: gcc libc6-dev"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
  fi
  echo "Installing wstest (autobahntestsuite) into $venv"
  mkdir -p "$root/.build"
  log="$root/.build/autobahn-install.log"
  : >"$log"
  export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_PYTHON_VERSION_WARNING=1
  if ! PYTHONPATH="$tools" "$python2" -c 'import virtualenv' 2>/dev/null; then
    rm -rf "$tools"
    # shellcheck disable=SC2086
    "$python2" -m pip install --quiet --target "$tools" $virtualenv_requirements >>"$log" 2>&1 \
      || { cat "$log" >&2; echo "autobahn.sh: could not install virtualenv (log: $log)" >&2; exit 1; }
  fi
  rm -rf "$venv"
  # --app-data keeps virtualenv's cache under .build instead of ~/.local/share.
  PYTHONPATH="$tools" "$python2" -m virtualenv --quiet --no-download --no-periodic-update \
    --app-data "$tools/app-data" "$venv" >>"$log" 2>&1 \
    || { cat "$log" >&2; echo "autobahn.sh: could not make the virtualenv (log: $log)" >&2; exit 1; }
  printf '%s\n' "$requirements" >"$venv/requirements.txt"
  if ! "$venv/bin/pip" install --quiet --no-warn-script-location -r "$venv/requirements.txt" >>"$log" 2>&1 \
     || ! "$venv/bin/pip" check >>"$log" 2>&1; then
    cat "$log" >&2
    echo "autobahn.sh: could not install autobahntestsuite (log: $log)" >&2
    exit 1
  fi
  # Written last: a half-made virtualenv is made again next time.
  printf '%s' "$requirements" >"$venv/courier-requirements.txt"
}

ensure_client() {
  if [ -n "${COURIER_AUTOBAHN_CLIENT:-}" ]; then
    client="$COURIER_AUTOBAHN_CLIENT"
    [ -x "$client" ] || { echo "autobahn.sh: COURIER_AUTOBAHN_CLIENT=$client is not an executable" >&2; exit 1; }
    return
  fi
  # The path SwiftPM links the build to (asking SwiftPM would wait for any build under way).
  local build_args=(-c "$configuration") scratch=.build
  if [ -n "$sanitizer" ]; then
    . scripts/lib/sanitized-build.sh
    sanitized_build_args "$sanitizer"
    scratch=$build_scratch
  fi
  client="$root/$scratch/$configuration/courier-autobahn"
  if [ "$rebuild" = 1 ] || [ ! -x "$client" ]; then
    scripts/lib/ensure-system.sh build >/dev/null
    echo "Building courier-autobahn ($configuration${sanitizer:+, $sanitizer sanitizer})"
    swift build "${build_args[@]}" --product courier-autobahn
  fi
}

ensure_venv
ensure_client
if ! command -v ss >/dev/null 2>&1; then
  echo "Installing: iproute2"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
fi

python="$venv/bin/python"
work=$(mktemp -d "${TMPDIR:-/tmp}/courier-autobahn.XXXXXX")
server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$reports"
mkdir -p "$reports"

# A free port on loopback (the kernel's choice; nothing else takes it in the moment between).
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# The spec: the cases asked for, the reports under .build.
"$python" - "$work/spec.json" "ws://127.0.0.1:$port" "$reports" "$patterns" "$skip_deflate" <<'PY'
import json, sys
path, url, outdir, patterns, skip_deflate = sys.argv[1:6]
cases = [p.strip() for p in patterns.split(",") if p.strip()] or ["*"]
# No case is left out by default: each needs only an ordinary client that echoes.
exclude = ["12.*", "13.*"] if skip_deflate == "1" else []
spec = {"url": url, "outdir": outdir, "cases": cases, "exclude-cases": exclude, "exclude-agent-cases": {}}
with open(path, "w") as f:
    json.dump(spec, f, indent=2)
PY

# The launcher: wstest as its own script starts it, except that a listening socket asked for on
# every interface (Twisted's '') is bound to 127.0.0.1 instead. wstest's module must come first:
# it installs its reactor on import.
cat >"$work/fuzzingserver.py" <<'PY'
import sys
from autobahntestsuite import wstest
from twisted.internet import reactor

listen_tcp = reactor.listenTCP

def listen_on_loopback(port, factory, backlog=50, interface=''):
    return listen_tcp(port, factory, backlog, interface or '127.0.0.1')

reactor.listenTCP = listen_on_loopback
sys.argv[0] = 'wstest'
sys.exit(wstest.run())
PY

echo "Starting the fuzzing server on 127.0.0.1:$port (cases: $patterns$([ "$skip_deflate" = 1 ] && echo ', without 12.* and 13.*'))"
# Unbuffered: the case count it prints at start is read from its log below.
(cd "$work" && PYTHONUNBUFFERED=1 exec "$python" "$work/fuzzingserver.py" -m fuzzingserver -u 0 -s "$work/spec.json") >"$reports/server.log" 2>&1 &
server_pid=$!

listening=""
for _ in $(seq 300); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$reports/server.log" >&2
    echo "autobahn.sh: the fuzzing server exited at start" >&2
    exit 1
  fi
  listening=$(ss -ltnH "sport = :$port" 2>/dev/null || true)
  [ -n "$listening" ] && break
  sleep 0.1
done
if [ -z "$listening" ]; then
  cat "$reports/server.log" >&2
  echo "autobahn.sh: the fuzzing server did not listen on port $port within 30 s" >&2
  exit 1
fi
# Every listening socket on the port must be loopback's (ss prints 0.0.0.0 or * for all).
if awk '{print $4}' <<<"$listening" | grep -qv "^127\.0\.0\.1:$port\$"; then
  echo "autobahn.sh: the fuzzing server listens beyond loopback, stopping:" >&2
  echo "$listening" >&2
  exit 1
fi
expected=$(sed -n 's/^Ok, will run \([0-9][0-9]*\) test cases.*/\1/p' "$reports/server.log" | head -1)

client_status=0
"$client" "ws://127.0.0.1:$port" --timeout "$timeout" 2>&1 | tee "$reports/client.log" || client_status=${PIPESTATUS[0]}
stop_server

if [ ! -f "$reports/index.json" ]; then
  echo "autobahn.sh: the server wrote no report ($reports/index.json); the client exited with $client_status" >&2
  exit 1
fi

# The summary, from the server's verdicts.
summary_status=0
"$python" - "$reports/index.json" "$agent" "${expected:-0}" <<'PY' || summary_status=$?
from __future__ import print_function
import json, sys

path, agent, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path) as f:
    results = json.load(f).get(agent, {})

columns = ["OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED"]
# Groups 12 and 13 are permessage-deflate: listed apart, failing the run all the same.
deflate_groups = (12, 13)

def key(case_id):
    return tuple(int(part) for part in case_id.split("."))

groups = {}
failed, close_failed, other = [], [], []
for case_id in sorted(results, key=key):
    result = results[case_id]
    group = key(case_id)[0]
    row = groups.setdefault(group, dict((name, 0) for name in columns + ["other", "close FAILED", "cases"]))
    row["cases"] += 1
    behavior = result.get("behavior")
    if behavior in columns:
        row[behavior] += 1
    else:
        row["other"] += 1
        other.append("%s=%s" % (case_id, behavior))
    if behavior == "FAILED":
        failed.append(case_id)
    if result.get("behaviorClose") == "FAILED":
        row["close FAILED"] += 1
        close_failed.append(case_id)

header = ["group", "cases"] + columns + ["other", "close FAILED"]
widths = [max(len(name), 5) for name in header]
print()
print("  ".join(name.rjust(width) for name, width in zip(header, widths)))
totals = dict((name, 0) for name in header[1:])
for group in sorted(groups):
    row = groups[group]
    cells = [str(group)] + [str(row[name]) for name in header[1:]]
    print("  ".join(cell.rjust(width) for cell, width in zip(cells, widths)))
    for name in header[1:]:
        totals[name] += row[name]
print("  ".join(cell.rjust(width) for cell, width in zip(["all"] + [str(totals[name]) for name in header[1:]], widths)))
print()

def show(label, ids):
    if ids:
        print("%s (%d): %s" % (label, len(ids), " ".join(ids)))

hard = [case_id for case_id in failed if key(case_id)[0] not in deflate_groups]
soft = [case_id for case_id in failed if key(case_id)[0] in deflate_groups]
show("FAILED", hard)
show("FAILED, permessage-deflate", soft)
show("closing handshake FAILED", close_failed)
show("other behaviour", other)

status = 0
if expected and len(results) < expected:
    print("autobahn.sh: %d of the %d cases are in the report" % (len(results), expected))
    status = 1
if hard or soft or close_failed:
    status = 1
print("autobahn: %d cases, %d FAILED outside permessage-deflate, %d FAILED in it, %d closing handshakes FAILED"
      % (len(results), len(hard), len(soft), len(close_failed)))
sys.exit(status)
PY

echo "Reports: $reports/index.html"
if [ "$client_status" != 0 ]; then
  echo "autobahn.sh: the client exited with $client_status" >&2
  exit 1
fi
exit "$summary_status"
