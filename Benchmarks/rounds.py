#!/usr/bin/env python3
"""W1 for a few clients, many rounds, in turns: rates and the client's user and system time a request.

run.py gives each client three rounds among thirty others; this takes a handful of W1 clients,
runs each of them ROUNDS times (the order reversed every other round, so that no client always
follows the same one), and prints the median rate, its ratio to the first client named, and the
median user and system time a request from the kernel's accounting of the client process
(wait4). It is for comparing shapes and builds side by side (hop-floor against Courier, a build
against another), with run.py's set-up: nginx on CPU 0, each client on CPU 1.

    python3 rounds.py [--rounds N] [--variant h1|tls-h1|tls-h2] [--markdown FILE] CLIENT...

CLIENT: wrk, h2load, hop-floor-direct, hop-floor-hop, hop-floor-loop, transport-floor-hop,
transport-floor-loop, Courier, Courier-loop, Courier-lto, or
BINARY=PATH for another courier-bench build (run as Courier). The binaries are those run.sh
builds (.build/release, .build-lto/release); run it once first.
"""
import argparse
import os
import signal
import statistics
import sys

import run


def swift_client(client):
    """The program, workload argument and extra environment of a W1 client built here (all but
    wrk and h2load); None for another name."""
    if client.startswith("hop-floor-") or client.startswith("transport-floor-"):
        program, _, shape = client.rpartition("-")
        return os.path.join(run.BIN, program), shape, {}
    if client in ("Courier", "Courier-loop"):
        extra = {"COURIER_BENCH_EXECUTOR": "loop"} if client == "Courier-loop" else {}
        return os.path.join(run.BIN, "courier-bench"), "w1", extra
    if client == "Courier-lto":
        return os.path.join(run.LTO_BIN, "courier-bench"), "w1", {}
    if "=" in client:
        return client.split("=", 1)[1], "w1", {}
    return None


def measure(runner, client, url, requests):
    """One W1 run of `client` through run.py's Runner: (requests a second, user µs a request,
    system µs a request)."""
    if client == "wrk":
        result = runner.wrk(url, 1, max(2, requests // 8000))
    elif client == "h2load":
        result = runner.h2load(url, requests, 1)
    elif (built := swift_client(client)) is not None:
        path, workload, extra = built
        result = runner.swift_client(os.path.basename(path), workload, url, requests,
                                     env=dict(runner.tls_env(), **extra), binary_path=path)
    else:
        raise SystemExit(f"unknown client {client}")
    user, system = runner.last_usage
    done = max(result["requests"], 1)
    return result["requests"] / result["seconds"], user * 1e6 / done, system * 1e6 / done


def parse_options(description, rounds, requests):
    """The options of rounds.py and trace_w1.py, and the W1 URL of the variant asked for."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--variant", default="h1", choices=["h1", "tls-h1", "tls-h2"])
    parser.add_argument("--requests", type=int, default=requests)
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("clients", nargs="+")
    options = parser.parse_args()
    scheme = "http" if options.variant == "h1" else "https"
    return options, f"{scheme}://127.0.0.1:{run.PORTS[options.variant]}/100.bin"


def in_turns(options, measure_one):
    """`measure_one(runner, client)` for each client, `options.rounds` times, in turns (the order
    reversed every other round), with run.py's nginx running: each client's results in order."""
    run.setup()
    runner = run.Runner(os.path.join(run.WORK, "pki"))
    nginx = run.start_nginx()
    samples = {client: [] for client in options.clients}
    try:
        for round_number in range(options.rounds):
            order = options.clients if round_number % 2 == 0 else options.clients[::-1]
            for client in order:
                samples[client].append(measure_one(runner, client))
            print(f"round {round_number + 1}/{options.rounds}", file=sys.stderr, flush=True)
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait()
    return samples


def medians(runs):
    """The median of each of the runs' figures, position by position."""
    return tuple(statistics.median(column) for column in zip(*runs))


def report(lines, markdown):
    """Prints the table, and writes it to `markdown` when given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if markdown:
        with open(markdown, "w") as handle:
            handle.write(text)


def main():
    options, url = parse_options(__doc__.splitlines()[0], 8, run.W1_REQUESTS)
    samples = in_turns(options, lambda runner, client: measure(runner, client, url, options.requests))
    reference = statistics.median(rate for rate, _, _ in samples[options.clients[0]])
    lines = [f"W1 {options.variant}, {options.requests:,} requests a run, {options.rounds} rounds in turns, client on CPU 1; "
             f"medians; ratios to {options.clients[0]}.", "",
             "| client | requests a second | × | user µs/req | system µs/req | rates of the rounds |",
             "|---|---:|---:|---:|---:|---|"]
    for client, runs in samples.items():
        rate, user, system = medians(runs)
        lines.append(f"| {client} | {rate:,.0f} | {rate / reference:.2f} | {user:.1f} | {system:.1f} | "
                     f"{', '.join(f'{r:,.0f}' for r, _, _ in runs)} |")
    report(lines, options.markdown)

if __name__ == "__main__":
    main()
