#!/usr/bin/env python3
"""Runs workloads W1-W4, U1 and W3R against nginx (U1: against upload_sink.py) with Courier and its
peers, interleaved over rounds, and writes medians and ratios to results/ as JSON and Markdown.

nginx runs on CPU 0 (one worker, access log off) and every client on CPU 1: on a 2-core machine
placement alone swings the results several-fold. Client CPU per request is user+sys time of
the client process (startup included) divided by the requests it made.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, ".build", "release")
# courier-bench again, linked with --static-swift-stdlib (run.sh builds it): W3's Courier-static.
STATIC_BIN = os.path.join(HERE, ".build-static", "release")
# courier-bench again, built with --experimental-lto-mode=full (run.sh builds it): W1's and W2's
# Courier-lto.
LTO_BIN = os.path.join(HERE, ".build-lto", "release")
WORK = os.path.join(HERE, ".build", "bench-work")
RESULTS = os.path.join(HERE, "results")
PORTS = {"h1": 18080, "tls-h1": 18443, "tls-h2": 18444, "tls-close": 18445}
W1_REQUESTS = 20000
W1_SLOW_REQUESTS = 5000  # FoundationNetworking runs ~1k req/s: fewer requests, same rate.
W2_REQUESTS = 20000
W4_CONNECTIONS = 1000
SINK_PORT = 18090  # upload_sink.py, for U1
WS_PORT = 18100  # ws_echo_server.py, for WS
WS_ECHOES = 20000
WS_BIG = 200
GIB = 1 << 30
MIB = 1 << 20
W3R_CUT = 512 * MIB  # where W3R's download is cancelled for resume data
# The workloads measured by volume: MB/s, and their ratio taken on it.
BY_VOLUME = ("W3", "U1", "WS 1MiB")


def version(*command):
    """The first line a tool prints of its version, or "not installed"."""
    try:
        return sh(*command).splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return f"{command[0]}: not installed"


def sh(*command, **kwargs):
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs).stdout


def setup():
    os.makedirs(os.path.join(WORK, "www"), exist_ok=True)
    os.makedirs(os.path.join(WORK, "logs"), exist_ok=True)
    with open(os.path.join(WORK, "www", "100.bin"), "wb") as handle:
        handle.write(os.urandom(100))
    big = os.path.join(WORK, "www", "1g.bin")
    if not os.path.exists(big) or os.path.getsize(big) != 1 << 30:
        # A sparse file: the server reads zeros from the page cache, no disk in the way.
        with open(big, "wb") as handle:
            handle.truncate(1 << 30)
    marked = os.path.join(WORK, "www", "1g-marked.bin")
    if not os.path.exists(marked) or os.path.getsize(marked) != GIB:
        # W3R's: sparse too, with a 4 KiB block at every MiB that starts with its own offset, so
        # that bytes a resume puts in the wrong place show when the file is compared.
        with open(marked + ".part", "wb") as handle:
            handle.truncate(GIB)
            for offset in range(0, GIB, MIB):
                handle.seek(offset)
                handle.write(f"{offset:015d}\n".encode() + os.urandom(4080))
        os.replace(marked + ".part", marked)
    pki = os.path.join(WORK, "pki")
    if not os.path.exists(os.path.join(pki, "server.pem")):
        os.makedirs(pki, exist_ok=True)
        curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        sh("openssl", "req", "-x509", *curve, "-keyout", f"{pki}/ca.key", "-out", f"{pki}/ca.pem", "-days", "3650",
           "-subj", "/CN=Courier Benchmark CA", "-addext", "basicConstraints=critical,CA:TRUE")
        sh("openssl", "req", *curve, "-keyout", f"{pki}/server.key", "-out", f"{pki}/server.csr", "-subj", "/CN=127.0.0.1")
        with open(f"{pki}/server.ext", "w") as handle:
            handle.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        sh("openssl", "x509", "-req", "-in", f"{pki}/server.csr", "-CA", f"{pki}/ca.pem", "-CAkey", f"{pki}/ca.key",
           "-CAcreateserial", "-out", f"{pki}/server.pem", "-days", "365", "-extfile", f"{pki}/server.ext")
        with open("/etc/ssl/certs/ca-certificates.crt") as system, open(f"{pki}/bundle.pem", "w") as bundle:
            bundle.write(system.read() + "\n" + open(f"{pki}/ca.pem").read())
    tls = f"ssl_certificate {pki}/server.pem; ssl_certificate_key {pki}/server.key; ssl_protocols TLSv1.2 TLSv1.3;"
    config = f"""
worker_processes 1;
daemon off;
pid {WORK}/nginx.pid;
error_log {WORK}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000000;
    keepalive_timeout 65s;
    default_type application/octet-stream;
    client_body_temp_path {WORK}/body;
    proxy_temp_path {WORK}/proxy;
    fastcgi_temp_path {WORK}/fastcgi;
    uwsgi_temp_path {WORK}/uwsgi;
    scgi_temp_path {WORK}/scgi;
    server {{ listen 127.0.0.1:{PORTS['h1']}; root {WORK}/www; location = /_status {{ stub_status; }} }}
    server {{ listen 127.0.0.1:{PORTS['tls-h1']} ssl; {tls} root {WORK}/www; }}
    server {{ listen 127.0.0.1:{PORTS['tls-h2']} ssl http2; {tls} root {WORK}/www; }}
    server {{ listen 127.0.0.1:{PORTS['tls-close']} ssl; {tls} ssl_session_tickets off; ssl_session_cache off;
             keepalive_timeout 0; root {WORK}/www; }}
}}
"""
    with open(os.path.join(WORK, "nginx.conf"), "w") as handle:
        handle.write(config)
    return pki


def start_nginx():
    process = subprocess.Popen(["taskset", "-c", "0", "nginx", "-p", WORK, "-c", os.path.join(WORK, "nginx.conf"),
                                "-e", os.path.join(WORK, "logs", "error.log")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            sh("curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{PORTS['h1']}/100.bin")
            return process
        except subprocess.CalledProcessError:
            time.sleep(0.05)
    raise SystemExit("nginx did not start; see " + os.path.join(WORK, "logs", "error.log"))


def start_pinned_server(script, port):
    """A Python server of ours, pinned beside nginx on CPU 0, once it accepts connections."""
    process = subprocess.Popen(["taskset", "-c", "0", sys.executable, os.path.join(HERE, script), str(port)],
                               stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    process.kill()
    raise SystemExit(f"{script} did not start on port {port}")


def start_sink():
    """U1's server: it reads each body whole, then answers."""
    return start_pinned_server("upload_sink.py", SINK_PORT)


def start_ws_server():
    """The WS workloads' echo server (it needs the websockets package)."""
    return start_pinned_server("ws_echo_server.py", WS_PORT)


def make_upload_file():
    """U1's 1 GiB file: real blocks (a file of holes is cheaper to read than one with data),
    flushed to disk before any upload so that no writeback runs under one. Deleted at the end."""
    path = os.path.join(WORK, "upload-1g.bin")
    if os.path.exists(path) and os.path.getsize(path) == GIB:
        return path
    block = os.urandom(MIB)
    with open(path, "wb") as handle:
        for _ in range(GIB // MIB):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def remove(path):
    if os.path.exists(path):
        os.remove(path)


def same_content(path, fixture, resumed_at):
    """Whether a resumed download equals its fixture without reading 1 GiB: the size, the marked
    block at every MiB, and byte for byte the MiB on either side of the resume offset and the last MiB."""
    size = os.path.getsize(fixture)
    if not os.path.exists(path) or os.path.getsize(path) != size:
        return False
    around = min(max(resumed_at - MIB, 0), size - 2 * MIB)
    spans = [(offset, 4096) for offset in range(0, size, MIB)] + [(around, 2 * MIB), (size - MIB, MIB)]
    with open(path, "rb") as got, open(fixture, "rb") as wanted:
        for offset, length in spans:
            got.seek(offset)
            wanted.seek(offset)
            if got.read(length) != wanted.read(length):
                return False
    return True


def failed(error):
    """A run that ended without its JSON (a crash, a hang cut short): counted as an error."""
    print(f"  failed: {str(error)[:400]}", flush=True)
    return {"requests": 0, "seconds": 0, "bytes": 0, "errors": 1, "cpu": 0, "rss": 0, "failure": str(error)[:400]}


class Runner:
    def __init__(self, pki):
        self.pki = pki
        self.samples = {}
        self.last_connections = None
        self.last_usage = (0.0, 0.0)

    def record(self, key, value):
        if self.last_connections is not None:
            value["connections"] = self.last_connections
        self.samples.setdefault(key, []).append(value)

    @staticmethod
    def accepted():
        """nginx's count of accepted connections (this query's own included), or None."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORTS['h1']}/_status", timeout=5) as response:
                return int(response.read().decode().split("\n")[2].split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def run(self, command, env=None):
        # Popen + wait4 to get the child's own rusage (ru_maxrss in KiB on Linux).
        full_env = dict(os.environ, **(env or {}))
        before = self.accepted()
        start = time.monotonic()
        # close_fds=False lets Python use posix_spawn (vfork), so the child's peak RSS is its
        # own, not a copy of this interpreter's pages inherited through fork.
        # GNU time reports the client's own peak RSS: a child of this interpreter would carry
        # the interpreter's pages into its high-water mark.
        process = subprocess.Popen(["taskset", "-c", "1", "/usr/bin/time", "-f", "courier-peak-rss-kb %M"] + command,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
        stdout = process.stdout.read()
        stderr = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        # User and system time apart, for rounds.py.
        self.last_usage = (usage.ru_utime, usage.ru_stime)
        peak = re.search(r"courier-peak-rss-kb (\d+)", stderr)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        after = self.accepted()
        # The second query's own connection is not the client's.
        self.last_connections = after - before - 1 if before is not None and after is not None else None
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {stderr.strip()[:400]}")
        return stdout, usage.ru_utime + usage.ru_stime, (int(peak.group(1)) if peak else usage.ru_maxrss) / 1024, wall

    def tls_env(self):
        return {"SSL_CERT_FILE": f"{self.pki}/bundle.pem", "BENCH_CA_FILE": f"{self.pki}/ca.pem"}

    # Clients: each returns a dict with requests, seconds, bytes and optional extras.
    def swift_client(self, binary, workload, url, argument, extra=None, env=None, binary_path=None):
        command = [binary_path or os.path.join(BIN, binary), workload, url, str(argument)] + ([str(extra)] if extra else [])
        stdout, cpu, rss, _ = self.run(command, env)
        result = json.loads(stdout.strip().splitlines()[-1])
        result.update(cpu=cpu, rss=rss)
        return result

    def python_client(self, script, workload, url, argument):
        command = [sys.executable, os.path.join(HERE, script), workload, url, str(argument)]
        stdout, cpu, rss, _ = self.run(command)
        result = json.loads(stdout.strip().splitlines()[-1])
        result.update(cpu=cpu, rss=rss)
        return result

    def go_client(self, workload, url, argument, extra=None, env=None):
        command = [os.path.join(HERE, "bin", "go-bench"), workload, url, str(argument)] + ([str(extra)] if extra else [])
        stdout, cpu, rss, _ = self.run(command, env)
        result = json.loads(stdout.strip().splitlines()[-1])
        result.update(cpu=cpu, rss=rss)
        return result

    def wrk(self, url, connections, seconds):
        stdout, cpu, rss, _ = self.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url])
        requests = int(re.search(r"(\d+) requests in ([\d.]+)s", stdout).group(1))
        duration = float(re.search(r"(\d+) requests in ([\d.]+)s", stdout).group(2))
        return {"requests": requests, "seconds": duration, "cpu": cpu, "rss": rss}

    def h2load(self, url, requests, streams, connections=1):
        stdout, cpu, rss, _ = self.run(["h2load", "-n", str(requests), "-c", str(connections), "-m", str(streams), url])
        match = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", stdout)
        seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
        done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", stdout).group(1))
        return {"requests": done, "seconds": seconds, "cpu": cpu, "rss": rss}

    def courier_load(self, url, requests, connections, streams):
        command = [os.path.join(HERE, "..", ".build", "release", "courier-load"), "-n", str(requests), "-c", str(connections), "-m", str(streams),
                   "--cacert", f"{self.pki}/ca.pem", "--json", url]
        stdout, cpu, rss, _ = self.run(command)
        result = json.loads(stdout)
        return {"requests": result["requests"], "seconds": result["seconds"], "cpu": cpu, "rss": rss,
                "connections": result["connectionsUsed"]}

    def curl_many(self, url, requests, http2=False):
        config = os.path.join(WORK, "curl-urls.txt")
        with open(config, "w") as handle:
            for _ in range(requests):
                handle.write(f'url = "{url}"\noutput = "/dev/null"\n')
        command = ["curl", "-s", "--cacert", f"{self.pki}/ca.pem", "-K", config] + (["--http2"] if http2 else ["--http1.1"])
        start = time.monotonic()
        _, cpu, rss, wall = self.run(command)
        return {"requests": requests, "seconds": wall, "cpu": cpu, "rss": rss}

    def curl_download(self, url, sink, http2=False):
        output = "/dev/null" if sink == "discard" else sink
        command = ["curl", "-s", "--cacert", f"{self.pki}/ca.pem", "-o", output, "-w", "%{time_total} %{size_download}", url]
        command += ["--http2"] if http2 else ["--http1.1"]
        stdout, cpu, rss, _ = self.run(command)
        seconds, size = stdout.split()
        return {"requests": 1, "seconds": float(seconds), "bytes": int(float(size)), "cpu": cpu, "rss": rss}

    # U1: one PUT of the file to upload_sink.py, which answers 200 only once it read every byte.
    def curl_upload(self, url, path):
        command = ["curl", "-s", "-o", "/dev/null", "-T", path, "-w", "%{time_total} %{size_upload} %{http_code}", url]
        stdout, cpu, rss, _ = self.run(command)
        self.last_connections = None  # the sink's connections are not nginx's to count
        seconds, size, status = stdout.split()
        whole = status == "200" and int(float(size)) == os.path.getsize(path)
        return {"requests": int(whole), "seconds": float(seconds), "bytes": int(float(size)) if whole else 0,
                "errors": int(not whole), "cpu": cpu, "rss": rss}

    def courier_upload(self, url, path, binary_path=None):
        result = self.swift_client("courier-bench", "u1", url, path, binary_path=binary_path)
        self.last_connections = None
        return result

    # W3R: the download to a file, interrupted at W3R_CUT bytes and resumed; both parts timed,
    # the file checked against the fixture and deleted.
    def courier_resumed(self, url, target, fixture, binary_path=None):
        # Courier keeps its partial file in the temporary directory: a private one, removed
        # after the run, so that a failed resume leaves nothing behind.
        scratch = os.path.join(WORK, "w3r-tmp")
        os.makedirs(scratch, exist_ok=True)
        try:
            result = self.swift_client("courier-bench", "w3r", url, target, W3R_CUT, env={"TMPDIR": scratch},
                                       binary_path=binary_path)
            result["verified"] = result["errors"] == 0 and same_content(target, fixture, result.get("resumedAt", -1))
        except RuntimeError as error:
            result = failed(error)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            remove(target)
        return result

    def curl_resumed(self, url, target, fixture):
        """curl's way to the same file: a first part that stops at W3R_CUT (a range request), then
        `-C -`, which asks for the rest from the file's size. Times, CPU and connections are
        the two processes' sums; peak RSS the larger."""
        remove(target)
        parts, connections = [], 0
        for option in (["-r", f"0-{W3R_CUT - 1}"], ["-C", "-"]):
            command = ["curl", "-s", "--http1.1", *option, "-o", target, "-w", "%{time_total} %{http_code}", url]
            stdout, cpu, rss, _ = self.run(command)
            connections += self.last_connections or 0
            seconds, status = stdout.split()
            parts.append({"seconds": float(seconds), "status": status, "cpu": cpu, "rss": rss})
        self.last_connections = connections
        whole = all(part["status"] == "206" for part in parts)
        result = {"requests": int(whole), "seconds": sum(part["seconds"] for part in parts),
                  "bytes": os.path.getsize(target) if whole else 0, "errors": int(not whole),
                  "cpu": sum(part["cpu"] for part in parts), "rss": max(part["rss"] for part in parts),
                  "cancelledAt": W3R_CUT, "resumedAt": W3R_CUT, "verified": whole and same_content(target, fixture, W3R_CUT)}
        remove(target)
        return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="W1,W2,W3,W4,U1,W3R")
    parser.add_argument("--quick", action="store_true", help="fewer requests, one round: a smoke test")
    parser.add_argument("--clients", default="", help="only these clients (comma-separated names as in the table)")
    parser.add_argument("--baseline", default="", help="a courier-bench binary built from another commit: "
                        "measured as 'Courier (baseline)' beside Courier, interleaved, for before/after tables")
    parser.add_argument("--instructions", action="store_true", help="instructions (and Courier's allocations) per request "
                        "on W1 and W2, h1 and h2, instead of rates: see instructions.py")
    options = parser.parse_args()
    global W1_REQUESTS, W1_SLOW_REQUESTS, W2_REQUESTS, W4_CONNECTIONS
    if options.quick:
        options.rounds = 1
        W1_REQUESTS, W1_SLOW_REQUESTS, W2_REQUESTS, W4_CONNECTIONS = 2000, 500, 2000, 100
    only = set(options.only.split(","))
    pki = setup()
    nginx = start_nginx()
    if options.instructions:
        try:
            count_instructions(pki, options)
        finally:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait()
        return
    runner = Runner(pki)
    began = time.monotonic()
    base = {name: f"http{'s' if name != 'h1' else ''}://127.0.0.1:{port}" for name, port in PORTS.items()}
    tls = runner.tls_env()
    # Courier-loop: the same calls from a task that prefers the session's event loop
    # (URLSession.courierTaskExecutor), where requests start and resume without a thread hop.
    loop = {"COURIER_BENCH_EXECUTOR": "loop"}
    preload = {"LD_PRELOAD": os.path.join(BIN, "libMallocCounter.so")}
    lto = os.path.join(LTO_BIN, "courier-bench")
    wrk_seconds = max(2, W1_REQUESTS // 8000)
    wanted = set(filter(None, options.clients.split(",")))
    current_round = [0]
    upload_server = None
    ws_server = None

    def rec(key, client, measure, *arguments, output=None, **keywords):
        """Measures one client unless --clients leaves it out. With --baseline, a Courier
        measurement is paired with the same one of the baseline binary, in turns: first in one
        round, second in the next.

        `output`, a file the client writes, is removed and the page cache written back
        (sync) before each measurement, untimed: otherwise the client after a 1 GiB write
        paid for that write's writeback and for dropping the old file's pages (in one run,
        the same Courier binary measured 843 and 1,123 MB/s in W3 h1 file, one after curl)."""
        runs = [(client, keywords)] if not wanted or client in wanted else []
        if client == "Courier" and options.baseline:
            runs.append(("Courier (baseline)", dict(keywords, binary_path=options.baseline)))
            if current_round[0] % 2 == 1:
                runs.reverse()
        for name, arguments_by_name in runs:
            if output:
                if os.path.exists(output):
                    os.remove(output)
                os.sync()
            runner.record((key, name), measure(*arguments, **arguments_by_name))

    try:
        if "WS" in only:
            ws_server = start_ws_server()
        if "U1" in only:
            upload_server = start_sink()
            upload = make_upload_file()
        for round_number in range(options.rounds):
            current_round[0] = round_number
            print(f"round {round_number + 1}/{options.rounds}", flush=True)
            if "W1" in only:
                for variant, url in [("h1", base["h1"] + "/100.bin"), ("tls-h1", base["tls-h1"] + "/100.bin"),
                                     ("tls-h2", base["tls-h2"] + "/100.bin")]:
                    key = f"W1 {variant}"
                    if variant == "tls-h2":
                        rec(key, "h2load", runner.h2load, url, W1_REQUESTS, 1)
                    else:
                        rec(key, "wrk", runner.wrk, url, 1, wrk_seconds)
                    rec(key, "Courier", runner.swift_client, "courier-bench", "w1", url, W1_REQUESTS, env=tls)
                    rec(key, "Courier-loop", runner.swift_client, "courier-bench", "w1", url, W1_REQUESTS, env=dict(tls, **loop))
                    rec(key, "Courier-lto", runner.swift_client, "courier-bench", "w1", url, W1_REQUESTS, env=tls, binary_path=lto)
                    rec(key, "courier-load", runner.courier_load, url, W1_REQUESTS, 1, 1)
                    rec(key, "Go", runner.go_client, "w1", url, W1_REQUESTS, env=tls)
                    rec(key, "AsyncHTTPClient", runner.swift_client, "ahc-bench", "w1", url, W1_REQUESTS, env=tls)
                    rec(key, "curl", runner.curl_many, url, W1_REQUESTS, http2=variant == "tls-h2")
                    # What the shapes cost apart from any HTTP library: wrk's (one thread),
                    # an await resumed by a loop thread (URLSession's), and the same await
                    # preferring the loop as its executor (Courier-loop's).
                    for shape in ("direct", "hop", "loop"):
                        rec(key, f"hop-floor {shape}", runner.swift_client, "hop-floor", shape, url, W1_REQUESTS, env=tls)
                    # Courier's transport with the least a session layer must add (an await,
                    # one object, a Data): how close any URLSession on this stack could come.
                    for shape in ("hop", "loop"):
                        rec(key, f"transport-floor {shape}", runner.swift_client, "transport-floor", shape, url, W1_REQUESTS, env=tls)
                    if variant == "h1":
                        rec(key, "FoundationNetworking", runner.swift_client, "foundation-bench", "w1", url, W1_SLOW_REQUESTS)
                        if not wanted or "Courier" in wanted:
                            allocations = runner.swift_client("courier-bench", "w1", url, 2000, env=preload)
                            runner.record(("W1 h1 allocations", "Courier"), allocations)
            if "W2" in only:
                url = base["h1"] + "/100.bin"
                rec("W2 h1", "wrk", runner.wrk, url, 32, wrk_seconds)
                rec("W2 h1", "Courier", runner.swift_client, "courier-bench", "w2", url, W2_REQUESTS, 32)
                rec("W2 h1", "Courier-loop", runner.swift_client, "courier-bench", "w2", url, W2_REQUESTS, 32, env=loop)
                rec("W2 h1", "Courier-lto", runner.swift_client, "courier-bench", "w2", url, W2_REQUESTS, 32, binary_path=lto)
                # W2's shape until 2026-12-07: a child task a request, which the harness pays for.
                rec("W2 h1", "Courier, a task a request", runner.swift_client, "courier-bench", "w2t", url, W2_REQUESTS, 32)
                rec("W2 h1", "courier-load", runner.courier_load, url, W2_REQUESTS, 32, 1)
                rec("W2 h1", "Go", runner.go_client, "w2", url, W2_REQUESTS, 32)
                rec("W2 h1", "AsyncHTTPClient", runner.swift_client, "ahc-bench", "w2", url, W2_REQUESTS, 32)
                url = base["tls-h2"] + "/100.bin"
                rec("W2 tls-h2", "h2load", runner.h2load, url, W2_REQUESTS, 32)
                rec("W2 tls-h2", "Courier", runner.swift_client, "courier-bench", "w2", url, W2_REQUESTS, 32, env=tls)
                rec("W2 tls-h2", "Courier-loop", runner.swift_client, "courier-bench", "w2", url, W2_REQUESTS, 32, env=dict(tls, **loop))
                rec("W2 tls-h2", "Courier-lto", runner.swift_client, "courier-bench", "w2", url, W2_REQUESTS, 32, env=tls, binary_path=lto)
                rec("W2 tls-h2", "Courier, a task a request", runner.swift_client, "courier-bench", "w2t", url, W2_REQUESTS, 32, env=tls)
                rec("W2 tls-h2", "courier-load", runner.courier_load, url, W2_REQUESTS, 1, 32)
                rec("W2 tls-h2", "Go", runner.go_client, "w2", url, W2_REQUESTS, 32, env=tls)
                rec("W2 tls-h2", "AsyncHTTPClient", runner.swift_client, "ahc-bench", "w2", url, W2_REQUESTS, 32, env=tls)
            if "W3" in only:
                for variant, url in [("h1", base["h1"] + "/1g.bin"), ("tls-h2", base["tls-h2"] + "/1g.bin")]:
                    for sink in ["discard", os.path.join(WORK, "download.bin")]:
                        key = f"W3 {variant} {'discard' if sink == 'discard' else 'file'}"
                        output = None if sink == "discard" else sink
                        clients = [
                            ("curl", runner.curl_download, (url, sink), dict(http2=variant == "tls-h2")),
                            ("Courier", runner.swift_client, ("courier-bench", "w3", url, sink), dict(env=tls)),
                            ("Go", runner.go_client, ("w3", url, sink), dict(env=tls)),
                            ("AsyncHTTPClient", runner.swift_client, ("ahc-bench", "w3", url, sink), dict(env=tls)),
                            # The same program with the Swift runtime and Foundation linked in:
                            # what the peak RSS is without the shared libraries' pages.
                            ("Courier-static", runner.swift_client, ("courier-bench", "w3", url, sink),
                             dict(env=tls, binary_path=os.path.join(STATIC_BIN, "courier-bench"))),
                        ]
                        # Each round starts with another client. This machine's VM hands memory
                        # the guest frees back to the host after about two seconds (virtio-balloon
                        # free page reporting), and the first write to such a page costs a fault
                        # on the host: the first file download after a pause paid up to 2 s more
                        # of system time for its page cache than the next, which reused the pages
                        # of the file removed just before it. A fixed order put curl first in
                        # every round.
                        turn = round_number % len(clients)
                        for name, measure, arguments, keywords in clients[turn:] + clients[:turn]:
                            rec(key, name, measure, *arguments, output=output, **keywords)
                        if sink != "discard" and os.path.exists(sink):
                            os.remove(sink)
            if "U1" in only:
                url = f"http://127.0.0.1:{SINK_PORT}/upload"
                rec("U1 h1", "curl", runner.curl_upload, url, upload)
                rec("U1 h1", "Courier", runner.courier_upload, url, upload)
            if "W3R" in only:
                url, fixture = base["h1"] + "/1g-marked.bin", os.path.join(WORK, "www", "1g-marked.bin")
                target = os.path.join(WORK, "resumed.bin")
                clients = [("curl", runner.curl_resumed), ("Courier", runner.courier_resumed)]
                # In turns, for the reason given at W3.
                for name, measure in clients[round_number % 2:] + clients[:round_number % 2]:
                    rec("W3R h1 file", name, measure, url, target, fixture, output=target)
            if "W4" in only:
                url = base["tls-close"] + "/100.bin"
                rec("W4 tls", "Courier", runner.swift_client, "courier-bench", "w4", url, W4_CONNECTIONS, env=tls)
                rec("W4 tls", "Go", runner.go_client, "w4", url, W4_CONNECTIONS, env=tls)
                rec("W4 tls", "AsyncHTTPClient", runner.swift_client, "ahc-bench", "w4", url, W4_CONNECTIONS, env=tls)
                rec("W4 tls", "curl", runner.curl_many, url, W4_CONNECTIONS)
            if "WS" in only:
                url = f"ws://127.0.0.1:{WS_PORT}/"
                for key, mode, count in [("WS echo", "echo", WS_ECHOES), ("WS 1MiB", "big", WS_BIG)]:
                    rec(key, "Courier", runner.swift_client, "courier-bench", f"ws-{mode}", url, count)
                    rec(key, "websockets", runner.python_client, "ws_client.py", mode, url, count)
            if "CACHE" in only:
                # A cache hit through URLSession.data(for:), next to the network round trip it saves.
                url = base["h1"] + "/100.bin"
                if "W1" not in only:
                    rec("W1 h1", "Courier", runner.swift_client, "courier-bench", "w1", url, W1_REQUESTS, env=tls)
                rec("W1 h1 cache hit", "Courier (memory)", runner.swift_client, "courier-bench", "hit", url, W1_REQUESTS, "memory", env=tls)
                rec("W1 h1 cache hit", "Courier (disk)", runner.swift_client, "courier-bench", "hit", url, W1_REQUESTS, "disk", env=tls)
        micro = json.loads(runner.run([os.path.join(BIN, "parser-bench")])[0]) if "W1" in only and not wanted else {}
        if "COOKIES" in only:
            micro["cookie lookup"] = json.loads(runner.run([os.path.join(BIN, "cookie-bench")])[0])
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait()
        for server in [upload_server, ws_server]:
            if server is not None:
                server.terminate()
                server.wait()
        # No large file stays behind: U1's upload, and whatever an interrupted download left.
        for leftover in ["upload-1g.bin", "resumed.bin", "download.bin"]:
            remove(os.path.join(WORK, leftover))
        shutil.rmtree(os.path.join(WORK, "w3r-tmp"), ignore_errors=True)
    report(runner.samples, micro, options, time.monotonic() - began)


def count_instructions(pki, options):
    """run.py --instructions: instructions.py's table, in results/<date>-instructions.{json,md}."""
    import instructions
    base = {name: f"http{'s' if name != 'h1' else ''}://127.0.0.1:{port}" for name, port in PORTS.items()}
    tls = {"SSL_CERT_FILE": f"{pki}/bundle.pem", "BENCH_CA_FILE": f"{pki}/ca.pem"}
    paths = {"here": HERE, "bin": BIN, "lto-bin": LTO_BIN, "work": WORK, "pki": pki}
    wanted = set(filter(None, options.clients.split(",")))
    began = time.monotonic()
    kind, size, table = instructions.run(paths, base, tls, options.rounds, wanted)
    now = datetime.datetime.now(datetime.timezone.utc)
    document = {"date": now.isoformat(timespec="seconds"), "counter": kind, "requests": size, "rounds": options.rounds,
                "elapsedSeconds": round(time.monotonic() - began), "workloads": table,
                "machine": {"cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?"),
                            "cores": os.cpu_count(), "kernel": platform.release(), "swift": sh("swift", "--version").splitlines()[0]}}
    os.makedirs(RESULTS, exist_ok=True)
    stamp = now.strftime("%Y-%m-%dT%H%M")
    for name in ([f"{stamp}-instructions"] if wanted else ["latest-instructions", f"{stamp}-instructions"]):
        with open(os.path.join(RESULTS, f"{name}.json"), "w") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
        with open(os.path.join(RESULTS, f"{name}.md"), "w") as handle:
            handle.write(instructions.markdown(document))
    print(instructions.markdown(document))


REFERENCE = {"W1 h1": "wrk", "W1 tls-h1": "wrk", "W1 tls-h2": "h2load", "W2 h1": "wrk", "W2 tls-h2": "h2load",
             "WS echo": "websockets", "WS 1MiB": "websockets"}


def report(samples, micro, options, elapsed):
    rows = {}
    for (workload, client), every in samples.items():
        # A run that ended without its figures (failed()) counts in failures, not in the medians.
        runs = [run for run in every if "failure" not in run or run["seconds"] > 0] or every
        rates = [run["requests"] / run["seconds"] for run in runs if run["seconds"] > 0]
        entry = {
            "rounds": len(every),
            "requestsPerSecond": statistics.median(rates) if rates else 0,
            "cpuMicrosecondsPerRequest": statistics.median(run["cpu"] / max(run["requests"], 1) * 1e6 for run in runs),
            "peakRSSMB": max(run["rss"] for run in runs),
        }
        if all("bytes" in run for run in runs) and workload.startswith(BY_VOLUME):
            speeds = [run["bytes"] / run["seconds"] / 1e6 for run in runs if run["seconds"] > 0]
            entry["MBps"] = statistics.median(speeds) if speeds else 0
        if workload.startswith("W3R"):
            entry["resumedAtBytes"] = [run.get("resumedAt", -1) for run in every]
            entry["verified"] = all(run.get("verified", False) for run in every)
        failures = [run["failure"] for run in every if run.get("failure")]
        if failures:
            entry["failures"] = failures
        if all("allocations" in run for run in runs):
            entry["allocationsPerRequest"] = round(statistics.median(run["allocations"] / max(run["requests"], 1) for run in runs), 1)
        if all("connections" in run for run in runs):
            entry["connectionsUsed"] = max(run["connections"] for run in runs)
        rows.setdefault(workload, {})[client] = entry
    machine = {
        "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?"),
        "cores": os.cpu_count(), "kernel": platform.release(),
        "swift": sh("swift", "--version").splitlines()[0], "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
        "go": version("go", "version"), "curl": version("curl", "--version"),
    }
    now = datetime.datetime.now(datetime.timezone.utc)
    document = {"date": now.isoformat(timespec="seconds"), "machine": machine, "rounds": options.rounds,
                "elapsedSeconds": round(elapsed), "workloads": rows, "parser": micro}
    os.makedirs(RESULTS, exist_ok=True)
    stamp = now.strftime("%Y-%m-%dT%H%M")
    # A partial run (some clients or workloads, a baseline) is kept under its date only: latest
    # is the full table.
    partial = bool(options.clients or options.baseline) or not {"W1", "W2", "W3", "W4"} <= set(options.only.split(","))
    for name in ([stamp] if partial else ["latest", stamp]):
        with open(os.path.join(RESULTS, f"{name}.json"), "w") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
        with open(os.path.join(RESULTS, f"{name}.md"), "w") as handle:
            handle.write(markdown(document))
    print(markdown(document))


def markdown(document):
    lines = [f"# Courier benchmarks — {document['date']}", "",
             f"Machine: {document['machine']['cpu']}, {document['machine']['cores']} cores, Linux {document['machine']['kernel']}; "
             f"{document['machine']['swift']}; {document['machine']['nginx']}; {document['machine']['go']}; {document['machine']['curl']}.",
             f"nginx on CPU 0 (1 worker, access log off), each client on CPU 1. Medians of {document['rounds']} interleaved rounds; "
             f"the run took {document['elapsedSeconds']} s.", "",
             "| workload | client | req/s | × reference | client CPU µs/req | MB/s | peak RSS MB | connections | allocs/req |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for workload in sorted(document["workloads"]):
        clients = document["workloads"][workload]
        reference = clients.get(REFERENCE.get(workload, "curl"))
        for client, entry in sorted(clients.items(), key=lambda item: -item[1]["requestsPerSecond"]):
            ratio = ""
            if reference and reference["requestsPerSecond"]:
                base = reference.get("MBps", reference["requestsPerSecond"]) if workload.startswith(BY_VOLUME) else reference["requestsPerSecond"]
                value = entry.get("MBps", entry["requestsPerSecond"]) if workload.startswith(BY_VOLUME) else entry["requestsPerSecond"]
                ratio = f"{value / base:.2f}" if base else ""
            lines.append(f"| {workload} | {client} | {entry['requestsPerSecond']:.0f} | {ratio} | {entry['cpuMicrosecondsPerRequest']:.1f} | "
                         f"{entry.get('MBps', 0):.0f} | {entry['peakRSSMB']:.1f} | {entry.get('connectionsUsed', '')} | "
                         f"{entry.get('allocationsPerRequest', '')} |")
    resumed = document["workloads"].get("W3R h1 file", {})
    if resumed:
        lines += ["", "W3R: where each round's second part went on from (didResumeAtOffset for Courier), and whether the "
                  "file matched the fixture (size, a marked block at every MiB, the bytes around the resume offset):", ""]
        for client, entry in sorted(resumed.items()):
            offsets = ", ".join(f"{offset / MIB:.1f} MiB" if offset >= 0 else "not reported" for offset in entry["resumedAtBytes"])
            line = f"- {client}: resumed at {offsets}; file {'verified' if entry['verified'] else 'NOT verified'}"
            lines.append(line + (f"; failures: {'; '.join(entry['failures'])}" if entry.get("failures") else ""))
    cookies = (document.get("parser") or {}).get("cookie lookup")
    if cookies:
        lines += ["", f"Cookie lookup: the cookies for one request in a jar of {cookies['cookies']:,} cookies across {cookies['domains']} domains:", "",
                  "| level | ns/lookup | cookies matched |", "|---|---:|---:|",
                  f"| CookieJar + Cookie field (per request in a session) | {cookies['jar']['nsPerLookup']:.0f} | {cookies['jar']['cookiesPerLookup']:.0f} |",
                  f"| HTTPCookieStorage.cookies(for:) | {cookies['storage']['nsPerLookup']:.0f} | {cookies['storage']['cookiesPerLookup']:.0f} |"]
    parsers = {name: entry for name, entry in (document.get("parser") or {}).items() if name != "cookie lookup"}
    if parsers:
        lines += ["", "Parser micro-benchmarks (same input bytes; each parser's fastest of 7 rounds, the two taking turns, "
                  "and the median round):", "", "| input | parser | ns/response | median ns | MB/s |", "|---|---|---:|---:|---:|"]
        for name, entry in sorted(parsers.items()):
            for parser in ["courier", "http-parser"]:
                median = entry[parser].get("medianNsPerResponse")
                lines.append(f"| {name} | {parser} | {entry[parser]['nsPerResponse']:.0f} | {f'{median:.0f}' if median else ''} | {entry[parser]['MBps']:.0f} |")
    lines += ["", "W1: 20,000 sequential GETs of 100 B on one connection (FoundationNetworking: 5,000). W2: 20,000 GETs, 32 in flight "
              "(h1: up to 32 connections; h2: one connection), kept there by 32 workers that load one request after another "
              "(Courier, a task a request: a child task for each, W2's Swift shape until 2026-12-07). W3: a 1 GiB download to a discarding sink and to a file "
              "(Courier: a data task whose delegate drops the body, a download task for the file); MB/s and peak RSS. W4: 1,000 new TLS connections (full handshakes: tickets and the session cache are off), "
              "one GET each. U1: one 1 GiB PUT of a file on disk to a server that reads the whole body before it answers "
              "(Courier: uploadTask(with:fromFile:); curl -T). W3R: the 1 GiB download to a file, cancelled for resume data at "
              "512 MiB and resumed (Courier: cancel(byProducingResumeData:), downloadTask(withResumeData:); curl: -r 0-… then "
              "-C -), MB/s over both parts and the pause between. WS (--only WS): WebSocket round trips on one "
              "connection to a Python websockets echo server on CPU 0 (permessage-deflate off), 20,000 of a 100-byte text "
              "message and 200 of a 1 MiB binary one (MB/s: the payload one way); Courier: URLSessionWebSocketTask, "
              "against the websockets package's own client. × reference: against wrk (h1), h2load (h2), websockets (WS) or curl "
              "(W3, W4, U1, W3R). courier-load is Courier's load "
              "generator on the transport; Courier is the public URLSession API; Courier-static (W3) is the same "
              "courier-bench linked with --static-swift-stdlib (the Swift runtime and Foundation in the executable); "
              "Courier-lto (W1, W2) is the same courier-bench built with --experimental-lto-mode=full (link-time "
              "optimisation across Courier's modules and its C shims). "
              "hop-floor (W1) is the least a client can do in three shapes (over TLS h2 through nghttp2, one stream at a time, as h2load): direct (one thread, as wrk), hop (each "
              "request an await in a task on the global executor, resumed by a thread that reads the socket, as "
              "URLSession's data(for:)) and loop (the same await, the task preferring that thread as its executor, "
              "as Courier-loop). transport-floor (W1) is Courier's own transport with the least a session layer must add "
              "(an await with a cancellation handler, one object per request, a Data of the body), in the hop and loop "
              "shapes: the nearest any URLSession built on this stack could come."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
