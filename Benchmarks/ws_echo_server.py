#!/usr/bin/env python3
"""The WS workloads' server: a WebSocket echo on 127.0.0.1:PORT (the `websockets` package), with
permessage-deflate off, so every client sends and receives the same bytes on the wire. Each
message comes back as it arrived, text as text and binary as binary."""
import asyncio
import sys

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed


async def echo(connection):
    try:
        async for message in connection:
            await connection.send(message)
    except ConnectionClosed:
        # A client that leaves without the closing handshake ends its run all the same.
        pass


async def main(port):
    async with serve(echo, "127.0.0.1", port, compression=None, max_size=None, max_queue=None):
        await asyncio.get_running_loop().create_future()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
