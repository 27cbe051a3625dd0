"""Instruction counts per request (run.py --instructions): figures that repeat from run to run,
where wall-clock rates on this VM move 10-20%.

Each client runs a workload twice, with N and with 2N requests, under a counter of its user-space
instructions (all its threads): `perf stat -e instructions:u` where the machine has the hardware
counter, else valgrind's callgrind (the same count, simulated, about 50 times slower). The
difference over the N extra requests is the cost of a request, start-up and connection set-up
taken out. wrk runs for a time, not a count: its two runs differ by their request counts.

For Courier the heap allocations per request come with it, W1 and W2 on h1 and on h2
(CMallocCounter through LD_PRELOAD, the same difference of two runs).

The parser row ("parser head+100B") counts parser-bench's `count` mode the same way: Courier's
HTTP/1 response parser and http-parser each parsing the same nginx-like head with a 100-byte
body N and 2N times, the figure being a response's instructions. The timed parser row of the
rate run moves with the machine; this one does not.

Where perf can read the kernel's tracepoints, each client's system calls and context switches
per request come with it too (`perf stat -e raw_syscalls:sys_enter,context-switches`, the same
difference of two runs, at full speed): the kernel's side of a request, which instructions in
user space do not show — a thread hop costs futex calls and a second context switch.
"""
import json
import os
import re
import shutil
import statistics
import subprocess

# The parser row's name, and the responses of its shorter run.
PARSER_ROW = "parser head+100B"
PARSES = 50_000

# Requests of the shorter run, per counter (callgrind is slow), and wrk's seconds.
SIZES = {"perf": 5000, "callgrind": 1000}
WRK_SECONDS = {"perf": (2, 4), "callgrind": (3, 6)}


def counter():
    """'perf' when the kernel counts instructions for us, else 'callgrind', else None."""
    if shutil.which("perf"):
        probe = subprocess.run(["perf", "stat", "-x,", "-e", "instructions:u", "true"], capture_output=True, text=True)
        if probe.returncode == 0 and re.search(r"^\d+,", probe.stderr, re.M):
            return "perf"
    if shutil.which("valgrind"):
        return "callgrind"
    return None


# The kernel's side of a request: every system call, and every context switch.
KERNEL_EVENTS = "raw_syscalls:sys_enter,context-switches"


def kernel_counter():
    """True when perf counts system calls (tracepoints) and context switches for us."""
    if not shutil.which("perf"):
        return False
    probe = subprocess.run(["perf", "stat", "-x,", "-e", KERNEL_EVENTS, "true"],
                           capture_output=True, text=True)
    return probe.returncode == 0 and len(re.findall(r"^\d+,", probe.stderr, re.M)) == 2


def wrap(kind, command):
    if kind == "kernel":
        return ["perf", "stat", "-x,", "-e", KERNEL_EVENTS, "--"] + command
    if kind == "perf":
        return ["perf", "stat", "-x,", "-e", "instructions:u", "--"] + command
    return ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--cache-sim=no", "--branch-sim=no",
            "--trace-children=no"] + command


def valgrind_shim(paths):
    """valgrind/sigsuspend.c built into the work directory (see its header): preloaded under
    callgrind, without which valgrind 3.19 dies in every Swift client's dispatch_main()."""
    source = os.path.join(paths["here"], "valgrind", "sigsuspend.c")
    library = os.path.join(paths["work"], "libsigsuspend-copy.so")
    if not os.path.exists(library) or os.path.getmtime(library) < os.path.getmtime(source):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def parse(kind, stderr):
    """The counts a run's stderr gives: (instructions,), or for kind "kernel" (system calls,
    context switches)."""
    if kind == "kernel":
        syscalls = re.search(r"^(\d+),[^,]*,raw_syscalls:sys_enter", stderr, re.M)
        switches = re.search(r"^(\d+),[^,]*,context-switches", stderr, re.M)
        if not syscalls or not switches:
            raise RuntimeError(f"no system call count in: {stderr.strip()[-400:]}")
        return int(syscalls.group(1)), int(switches.group(1))
    if kind == "perf":
        match = re.search(r"^(\d+),[^,]*,instructions", stderr, re.M)
    else:
        match = re.search(r"Collected : (\d+)", stderr)
    if not match:
        raise RuntimeError(f"no instruction count in: {stderr.strip()[-400:]}")
    return (int(match.group(1)),)


def measure(paths, kind, client, url, count, env, tls):
    """One run of `client` making about `count` requests: (requests made, what `parse` counts)."""
    name, workload, concurrency = client
    full_env = dict(os.environ, **tls, **(env or {}))
    if kind == "callgrind":
        full_env["LD_PRELOAD"] = valgrind_shim(paths)
        if name == "Go":
            # Go's runtime preempts a goroutine by signalling its thread (SIGURG), and this
            # callgrind fails an assertion on such a signal ("sigNum ==
            # vgCallgrind_current_state.sig"): every TLS run of go-bench and some plain ones
            # died so. Without the signals a W1 h1 request counts as in the runs that survived
            # them: 64,674-66,892 instructions against 66,352-66,991 (Go's own count moves by
            # about 2% from run to run).
            full_env["GODEBUG"] = "asyncpreemptoff=1"
    if workload == "parser":
        command = [bench_binary(paths, kind, "parser-bench"), "count", "courier" if name == "Courier" else name, str(count)]
    elif name == "wrk":
        command = ["wrk", "-t1", f"-c{concurrency}", f"-d{count}s", url]
    elif name == "h2load":
        command = ["h2load", "-n", str(count), "-c", "1", "-m", str(concurrency), url]
    elif name == "curl":
        config = os.path.join(paths["work"], "curl-urls.txt")
        with open(config, "w") as handle:
            handle.write(f'url = "{url}"\noutput = "/dev/null"\n' * count)
        command = ["curl", "-s", "--cacert", f"{paths['pki']}/ca.pem", "-K", config] + (["--http2"] if "18444" in url else ["--http1.1"])
    elif name == "Go":
        command = [os.path.join(paths["here"], "bin", "go-bench"), workload, url, str(count)] + ([str(concurrency)] if workload == "w2" else [])
    elif name.startswith("hop-floor"):
        command = [os.path.join(paths["bin"], "hop-floor"), name.split()[1], url, str(count)]
    elif name.startswith("transport-floor"):
        command = [bench_binary(paths, kind, "transport-floor"), name.split()[1], url, str(count)]
    else:
        # courier-bench, for every Courier row; Courier-lto's is the LTO build's.
        build = "lto-bin" if name == "Courier-lto" else "bin"
        command = [bench_binary(paths, kind, directory=build), workload, url, str(count)] + ([str(concurrency)] if workload in ("w2", "w2t") else [])
    process = subprocess.run(["taskset", "-c", "1"] + wrap(kind, command), capture_output=True, text=True, env=full_env)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {process.stderr.strip()[-400:]}")
    if name == "wrk":
        requests = int(re.search(r"(\d+) requests in", process.stdout).group(1))
    elif name == "h2load":
        requests = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", process.stdout).group(1))
    elif name == "curl":
        requests = count
    else:
        requests = json.loads(process.stdout.strip().splitlines()[-1])["requests"]
    return requests, parse(kind, process.stderr)


def difference(paths, kind, client, url, counts, env, tls):
    """Runs `client` twice, `counts` requests (wrk: seconds), and returns each count over the
    second run's extra requests."""
    (first_requests, first), (second_requests, second) = (
        measure(paths, kind, client, url, count, env, tls) for count in counts)
    extra = max(second_requests - first_requests, 1)
    # A client that needs next to none of something (wrk's context switches on W2) can come
    # out a hair below zero.
    return tuple(max((after - before) / extra, 0.0) for before, after in zip(first, second))


def bench_binary(paths, kind, name="courier-bench", directory="bin"):
    """courier-bench (or parser-bench) of the build in paths[directory] (release, or with LTO);
    for callgrind a copy without its DWARF, which this valgrind fails to read ("request for
    range … exceeds valid image size") and which counting does not need."""
    binary = os.path.join(paths[directory], name)
    if kind != "callgrind":
        return binary
    stripped = os.path.join(paths["work"], f"{name}-{directory}-stripped")
    if not os.path.exists(stripped) or os.path.getmtime(stripped) < os.path.getmtime(binary):
        subprocess.run(["objcopy", "--strip-debug", binary, stripped], check=True)
    return stripped


def allocations(paths, url, workload, count, concurrency, tls):
    """Courier's heap allocations per request: two counted runs, N and 2N requests."""
    figures = []
    for size in (count, 2 * count):
        command = [os.path.join(paths["bin"], "courier-bench"), workload, url, str(size)] + ([str(concurrency)] if workload in ("w2", "w2t") else [])
        env = dict(os.environ, **tls, LD_PRELOAD=os.path.join(paths["bin"], "libMallocCounter.so"))
        process = subprocess.run(["taskset", "-c", "1"] + command, capture_output=True, text=True, env=env)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {process.stderr.strip()[-400:]}")
        result = json.loads(process.stdout.strip().splitlines()[-1])
        figures.append((result["requests"], result["allocations"]))
    return (figures[1][1] - figures[0][1]) / max(figures[1][0] - figures[0][0], 1)


def run(paths, base, tls, rounds, wanted):
    """Instructions (with perf's tracepoints, system calls and context switches; for Courier,
    allocations) per request, medians over `rounds`."""
    kind = counter()
    if kind is None:
        raise SystemExit("--instructions needs perf with a hardware instruction counter, or valgrind")
    size = SIZES[kind]
    loop = {"COURIER_BENCH_EXECUTOR": "loop"}
    plans = {
        "W1 h1": (base["h1"] + "/100.bin", [("wrk", "w1", 1), ("Courier", "w1", 1), ("Courier-loop", "w1", 1), ("Courier-lto", "w1", 1), ("Go", "w1", 1),
                                            ("curl", "w1", 1), ("hop-floor hop", "w1", 1), ("hop-floor loop", "w1", 1),
                                            ("transport-floor hop", "w1", 1), ("transport-floor loop", "w1", 1)]),
        "W1 tls-h2": (base["tls-h2"] + "/100.bin", [("h2load", "w1", 1), ("Courier", "w1", 1), ("Courier-loop", "w1", 1), ("Courier-lto", "w1", 1), ("Go", "w1", 1),
                                                    ("curl", "w1", 1), ("hop-floor hop", "w1", 1), ("hop-floor loop", "w1", 1),
                                                    ("transport-floor hop", "w1", 1), ("transport-floor loop", "w1", 1)]),
        "W2 h1": (base["h1"] + "/100.bin", [("wrk", "w2", 32), ("Courier", "w2", 32), ("Courier-loop", "w2", 32), ("Courier-lto", "w2", 32), ("Go", "w2", 32),
                                            ("Courier, a task a request", "w2t", 32)]),
        "W2 tls-h2": (base["tls-h2"] + "/100.bin", [("h2load", "w2", 32), ("Courier", "w2", 32), ("Courier-loop", "w2", 32), ("Courier-lto", "w2", 32), ("Go", "w2", 32),
                                                    ("Courier, a task a request", "w2t", 32)]),
    }
    kernel = kernel_counter()
    rows = {}
    for round_number in range(rounds):
        print(f"instructions: round {round_number + 1}/{rounds} ({kind})", flush=True)
        for name in ("http-parser", "Courier"):
            if wanted and name not in wanted:
                continue
            try:
                per_response, = difference(paths, kind, (name, "parser", 0), "", (PARSES, 2 * PARSES), None, tls)
            except (RuntimeError, ValueError, KeyError) as error:
                print(f"  parser {name}: failed: {str(error)[:300]}", flush=True)
                continue
            print(f"  parser head+100B {name}: {per_response:,.0f} instructions a response", flush=True)
            rows.setdefault(PARSER_ROW, {}).setdefault(name, {"instructions": []})["instructions"].append(per_response)
        for workload, (url, clients) in plans.items():
            for client in clients:
                name = client[0]
                if wanted and name not in wanted:
                    continue
                env = loop if name == "Courier-loop" else None
                counts = WRK_SECONDS[kind] if name == "wrk" else (size, 2 * size)
                try:
                    per_request, = difference(paths, kind, client, url, counts, env, tls)
                except (RuntimeError, ValueError, AttributeError) as error:
                    print(f"  {workload} {name}: failed: {str(error)[:300]}", flush=True)
                    continue
                print(f"  {workload} {name}: {per_request:,.0f} instructions a request", flush=True)
                rows.setdefault(workload, {}).setdefault(name, {"instructions": []})["instructions"].append(per_request)
                if kernel:
                    counts = WRK_SECONDS["perf"] if name == "wrk" else (SIZES["perf"], 2 * SIZES["perf"])
                    try:
                        syscalls, switches = difference(paths, "kernel", client, url, counts, env, tls)
                    except (RuntimeError, ValueError, AttributeError) as error:
                        print(f"  {workload} {name}: system calls: failed: {str(error)[:300]}", flush=True)
                        continue
                    print(f"  {workload} {name}: {syscalls:.2f} system calls, {switches:.2f} context switches a request", flush=True)
                    entry = rows[workload][name]
                    entry.setdefault("syscalls", []).append(syscalls)
                    entry.setdefault("switches", []).append(switches)
            if (not wanted or "Courier" in wanted) and workload in plans:
                try:
                    per_request = allocations(paths, url, clients[1][1], 2000, clients[1][2], tls)
                    rows.setdefault(workload, {}).setdefault("Courier", {"instructions": []}).setdefault("allocations", []).append(per_request)
                    print(f"  {workload} Courier: {per_request:.1f} allocations a request", flush=True)
                except (RuntimeError, ValueError, KeyError) as error:
                    print(f"  {workload} Courier allocations: failed: {str(error)[:300]}", flush=True)
    table = {}
    for workload, clients in rows.items():
        for name, figures in clients.items():
            entry = {}
            if figures.get("instructions"):
                entry["instructionsPerRequest"] = round(statistics.median(figures["instructions"]))
            if figures.get("allocations"):
                entry["allocationsPerRequest"] = round(statistics.median(figures["allocations"]), 1)
            if figures.get("syscalls"):
                entry["syscallsPerRequest"] = round(statistics.median(figures["syscalls"]), 2)
                entry["contextSwitchesPerRequest"] = round(statistics.median(figures["switches"]), 2)
            table.setdefault(workload, {})[name] = entry
    return kind, size, table


REFERENCE = {"W1 h1": "wrk", "W2 h1": "wrk", "W1 tls-h2": "h2load", "W2 tls-h2": "h2load", PARSER_ROW: "http-parser"}


def markdown(document):
    kind = document["counter"]
    how = ("`perf stat -e instructions:u`" if kind == "perf"
           else "valgrind's callgrind (`--tool=callgrind --cache-sim=no`; the machine has no hardware instruction counter)")
    lines = [f"# Courier instruction counts — {document['date']}", "",
             f"Machine: {document['machine']['cpu']}, {document['machine']['cores']} cores, Linux {document['machine']['kernel']}; "
             f"{document['machine']['swift']}.",
             f"User-space instructions of the client process (all threads), counted with {how}; a request's figure is the "
             f"difference between a run of {document['requests']:,} and one of {2 * document['requests']:,} requests over the "
             f"extra requests (wrk: two runs of different lengths, over the difference of their request counts). Medians of "
             f"{document['rounds']} rounds. Allocations: Courier's heap allocations a request, the same way with 2,000 and 4,000 requests. "
             f"System calls and context switches: `perf stat -e raw_syscalls:sys_enter,context-switches`, all the client's threads, "
             f"the same way with {SIZES['perf']:,} and {2 * SIZES['perf']:,} requests at full speed (wrk: {WRK_SECONDS['perf'][0]} and "
             f"{WRK_SECONDS['perf'][1]} s); empty where perf cannot read the kernel's tracepoints.", "",
             "| workload | client | instructions/request | × reference | system calls/request | context switches/request | allocations/request |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for workload in sorted(document["workloads"]):
        clients = document["workloads"][workload]
        reference = clients.get(REFERENCE[workload], {}).get("instructionsPerRequest")
        for name, entry in sorted(clients.items(), key=lambda item: item[1].get("instructionsPerRequest", 0)):
            count = entry.get("instructionsPerRequest")
            ratio = f"{count / reference:.2f}" if count and reference else ""
            kernel = f"{entry.get('syscallsPerRequest', '')} | {entry.get('contextSwitchesPerRequest', '')}"
            lines.append(f"| {workload} | {name} | {count:,} | {ratio} | {kernel} | {entry.get('allocationsPerRequest', '')} |"
                         if count is not None else f"| {workload} | {name} | | | {kernel} | {entry.get('allocationsPerRequest', '')} |")
    lines += ["", "× reference: instructions a request against wrk (h1) or h2load (h2); above 1 means more work than the "
              "reference for each request. Only the client is counted, never nginx.",
              "", f"{PARSER_ROW}: instructions a response of each HTTP/1 response parser alone (parser-bench count: the "
              f"same bytes parsed {PARSES:,} and {2 * PARSES:,} times), against http-parser."]
    return "\n".join(lines) + "\n"
