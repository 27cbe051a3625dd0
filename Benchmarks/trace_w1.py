#!/usr/bin/env python3
"""W1's critical path, traced: from a response to the next request, and from that request to its response.

A W1 request takes the client's work from reading one response to sending the next request (its
critical path: nothing overlaps it) plus the time from that send to the next response (nginx's
work, the kernel's and the wake-ups; what the client does after sending overlaps it). This runs
each W1 client named under `perf record`, with the system calls that mark the two ends traced
(read and recvfrom returning bytes from the socket, the entries of write, sendto and sendmsg), and
prints the median of each part over the requests, the first 200 left out (connection set-up,
TLS handshake). Tracing slows each step by a microsecond or two: compare clients traced alike,
not these figures with rounds.py's rates. nginx runs on CPU 0 and each client on CPU 1, as in
run.py.

    python3 trace_w1.py [--rounds N] [--requests N] [--variant h1|tls-h1|tls-h2] [--markdown FILE] CLIENT...

With several rounds the clients take turns (the order reversed every other round) and each
figure is the median of the rounds' medians.

CLIENT as for rounds.py: wrk, h2load, hop-floor-direct, hop-floor-hop, hop-floor-loop,
transport-floor-hop, transport-floor-loop, Courier, Courier-loop, or BINARY=PATH for another
courier-bench build. Needs perf and read access to the syscalls tracepoints (root here).
"""
import os
import re
import statistics
import subprocess
import tempfile

import rounds

EVENTS = ["syscalls:sys_enter_read", "syscalls:sys_exit_read", "syscalls:sys_enter_recvfrom",
          "syscalls:sys_exit_recvfrom", "syscalls:sys_enter_write", "syscalls:sys_enter_sendto",
          "syscalls:sys_enter_sendmsg"]
SKIPPED = 200


def command(client, url, requests):
    """The command line and extra environment of one W1 run of `client`."""
    if client == "wrk":
        # wrk runs for a time, not a count: about two seconds is some 20,000 requests.
        return ["wrk", "-t1", "-c1", "-d2s", url], {}
    if client == "h2load":
        return ["h2load", "-n", str(requests), "-c", "1", "-m", "1", url], {}
    built = rounds.swift_client(client)
    if built is None:
        raise SystemExit(f"unknown client {client}")
    path, workload, extra = built
    return [path, workload, url, str(requests)], extra


def number(trace, field=None):
    """A tracepoint's argument `field`, or the value a sys_exit tracepoint returns, as a signed
    number; None when it is not there."""
    match = re.search((field + r": " if field else "") + r"0x([0-9a-f]+)", trace)
    if not match:
        return None
    value = int(match.group(1), 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def segments(data):
    """(response → request, request → response) in µs for each request traced in `data`.

    The connection is the descriptor with the most calls of its scarcer kind, sends or reads that
    returned bytes (not the loop's eventfd, which is written and read as well); a request is the
    first send on it after a response, and its response the first read that returns bytes from
    it."""
    script = subprocess.run(["perf", "script", "-i", data, "--ns", "-F", "tid,time,event,trace"],
                            capture_output=True, text=True, check=True).stdout
    calls = []  # (time in µs, descriptor, "send" or "read")
    reading = {}  # the descriptor each thread is reading, between a read's entry and exit
    for line in script.splitlines():
        match = re.match(r"\s*(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if not match:
            continue
        thread, time, event, trace = match.group(1), float(match.group(2)) * 1e6, match.group(3), match.group(4)
        if event in ("syscalls:sys_enter_read", "syscalls:sys_enter_recvfrom"):
            reading[thread] = number(trace, "fd")
        elif event.startswith("syscalls:sys_exit_"):
            descriptor = reading.pop(thread, None)
            if descriptor is not None and (number(trace) or 0) > 0:
                calls.append((time, descriptor, "read"))
        else:
            calls.append((time, number(trace, "fd"), "send"))
    counts = {}
    for _, descriptor, kind in calls:
        sends, reads = counts.get(descriptor, (0, 0))
        counts[descriptor] = (sends + 1, reads) if kind == "send" else (sends, reads + 1)
    if not counts:
        return [], []
    connection = max(counts, key=lambda descriptor: min(counts[descriptor]))
    to_request, to_response = [], []
    sent = None      # when the last request went out
    answered = None  # when the first bytes of its response were read
    for time, descriptor, kind in calls:
        if descriptor != connection:
            continue
        if kind == "read":
            if sent is not None and answered is None:
                answered = time
                to_response.append(time - sent)
        elif answered is not None or sent is None:
            # The first send after a response (or the very first): the next request.
            if answered is not None:
                to_request.append(time - answered)
            sent, answered = time, None
    return to_request[SKIPPED:], to_response[SKIPPED:]


def trace(runner, client, url, requests, data):
    """One traced W1 run of `client`: (requests traced, median µs from a response to the next
    request, median µs from a request to its response)."""
    argv, extra = command(client, url, requests)
    env = dict(os.environ, **runner.tls_env(), **extra)
    record = ["perf", "record", "-q", "-o", data] + [part for event in EVENTS for part in ("-e", event)]
    subprocess.run(record + ["--", "taskset", "-c", "1"] + argv, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    to_request, to_response = segments(data)
    if not to_request or not to_response:
        raise SystemExit(f"{client}: no request traced (did it run against this variant? are perf's syscalls tracepoints readable?)")
    return len(to_request), statistics.median(to_request), statistics.median(to_response)


def main():
    options, url = rounds.parse_options(__doc__.splitlines()[0], 1, 5000)
    with tempfile.TemporaryDirectory() as scratch:
        data = os.path.join(scratch, "perf.data")
        samples = rounds.in_turns(options, lambda runner, client: trace(runner, client, url, options.requests, data))
    lines = [f"W1 {options.variant}, traced (perf record of the read and send system calls), client on CPU 1; "
             f"medians over the requests, the first {SKIPPED} left out; {options.rounds} round(s), median of their medians.", "",
             "| client | requests a round | response → next request, µs | request → response, µs | sum, µs |",
             "|---|---:|---:|---:|---:|"]
    for client, runs in samples.items():
        count, to_request, to_response = rounds.medians(runs)
        lines.append(f"| {client} | {count:,.0f} | {to_request:.1f} | {to_response:.1f} | {to_request + to_response:.1f} |")
    rounds.report(lines, options.markdown)

if __name__ == "__main__":
    main()
