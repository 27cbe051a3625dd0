#!/usr/bin/env python3
"""The `websockets` package's client (its threaded sync API) on the WS workloads, for comparison
with Courier's URLSessionWebSocketTask on the same server:

  ws_client.py echo URL COUNT    COUNT sequential round trips of a 100-byte text message
  ws_client.py big URL COUNT     COUNT sequential round trips of a 1 MiB binary message

It prints one JSON object as courier-bench does: requests (round trips), seconds, bytes (echoed
payload, one way) and errors."""
import json
import os
import sys
import time

from websockets.sync.client import connect


def main():
    workload, url, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    message = "x" * 100 if workload == "echo" else os.urandom(1 << 20)
    errors = 0
    with connect(url, compression=None, max_size=None) as connection:
        connection.send(message)
        connection.recv()
        start = time.monotonic()
        for _ in range(count):
            connection.send(message)
            if connection.recv() != message:
                errors += 1
        elapsed = time.monotonic() - start
    print(json.dumps({"requests": count, "seconds": elapsed, "bytes": count * len(message), "errors": errors}))


if __name__ == "__main__":
    main()
