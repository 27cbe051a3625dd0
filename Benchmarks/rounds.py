#!/usr/bin/env python3
"""W1 for a few clients, many rounds, in turns: rates and the client's user and system time a request.

run.py gives each client three rounds among thirty others; this takes a handful of W1 clients,
runs each of them ROUNDS times (the order reversed every other round, so that no client always
follows the same one), and prints the median rate, its ratio to the first client named, and the
median user and system time a request from the kernel's accounting of the client process
(wait4). It is for comparing shapes and builds side by side (hop-floor against Courier, a build
against another), with run.py's set-up: nginx on CPU 0, each client on CPU 1.

    python3 rounds.py [--rounds N] [--variant h1|tls-h1|tls-h2] [--markdown FILE] CLIENT...

CLIENT: wrk, h2load, hop-floor-direct, hop-floor-hop, hop-floor-loop, Courier, Courier-loop, or
BINARY=PATH for another courier-bench build (run as Courier). The binaries are those run.sh
builds (.build/release); run it once first.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys

import run


def command(client, url, requests, pki):
    """(argv, extra environment) of one W1 run of `client`."""
    tls = {"SSL_CERT_FILE": f"{pki}/bundle.pem", "BENCH_CA_FILE": f"{pki}/ca.pem"}
    if client == "wrk":
        return ["wrk", "-t1", "-c1", f"-d{max(2, requests // 8000)}s", url], {}
    if client == "h2load":
        return ["h2load", "-n", str(requests), "-c", "1", "-m", "1", url], {}
    if client.startswith("hop-floor-"):
        return [os.path.join(run.BIN, "hop-floor"), client.split("-")[-1], url, str(requests)], tls
    if client in ("Courier", "Courier-loop"):
        extra = dict(tls, COURIER_BENCH_EXECUTOR="loop") if client == "Courier-loop" else tls
        return [os.path.join(run.BIN, "courier-bench"), "w1", url, str(requests)], extra
    if "=" in client:
        return [client.split("=", 1)[1], "w1", url, str(requests)], tls
    raise SystemExit(f"unknown client {client}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--variant", default="h1", choices=["h1", "tls-h1", "tls-h2"])
    parser.add_argument("--requests", type=int, default=run.W1_REQUESTS)
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("clients", nargs="+")
    options = parser.parse_args()
    scheme = "http" if options.variant == "h1" else "https"
    url = f"{scheme}://127.0.0.1:{run.PORTS[options.variant]}/100.bin"
    run.setup()
    pki = os.path.join(run.WORK, "pki")
    nginx = run.start_nginx()
    samples = {client: [] for client in options.clients}
    try:
        for round_number in range(options.rounds):
            order = options.clients if round_number % 2 == 0 else options.clients[::-1]
            for client in order:
                argv, extra = command(client, url, options.requests, pki)
                rate, usage, requests = timed(argv, extra)
                samples[client].append((rate, usage[0] * 1e6 / requests, usage[1] * 1e6 / requests))
            print(f"round {round_number + 1}/{options.rounds}", file=sys.stderr, flush=True)
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait()
    reference = statistics.median(rate for rate, _, _ in samples[options.clients[0]])
    lines = [f"W1 {options.variant}, {options.requests:,} requests a run, {options.rounds} rounds in turns, client on CPU 1; "
             f"medians; ratios to {options.clients[0]}.", "",
             "| client | requests a second | × | user µs/req | system µs/req | rates of the rounds |",
             "|---|---:|---:|---:|---:|---|"]
    for client, runs in samples.items():
        rate = statistics.median(r for r, _, _ in runs)
        lines.append(f"| {client} | {rate:,.0f} | {rate / reference:.2f} | {statistics.median(u for _, u, _ in runs):.1f} | "
                     f"{statistics.median(s for _, _, s in runs):.1f} | {', '.join(f'{r:,.0f}' for r, _, _ in runs)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if options.markdown:
        with open(options.markdown, "w") as handle:
            handle.write(text)


def timed(argv, extra):
    """One run: (requests a second, (user s, system s) of the client process, requests)."""
    process = subprocess.Popen(["taskset", "-c", "1"] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ, **extra))
    stdout = process.stdout.read()
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {stderr.strip()[-400:]}")
    if argv[0] == "wrk":
        match = re.search(r"(\d+) requests in ([\d.]+)s", stdout)
        requests, seconds = int(match.group(1)), float(match.group(2))
    elif argv[0] == "h2load":
        match = re.search(r"finished in ([\d.]+)(m?s)", stdout)
        seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
        requests = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", stdout).group(1))
    else:
        result = json.loads(stdout.strip().splitlines()[-1])
        requests, seconds = result["requests"], result["seconds"]
    return requests / seconds, (usage.ru_utime, usage.ru_stime), requests


if __name__ == "__main__":
    main()
