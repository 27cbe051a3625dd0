#!/usr/bin/env python3
"""The upload sink of the benchmark harness (U1): an HTTP/1.1 server that reads every request
body to its end into one reused 1 MiB buffer, and only then answers 200 with the number of body
bytes it read (as text), so a client can tell that the whole upload arrived.

Not nginx: a location that answers with `return` sends its response as soon as the head has
arrived and drains the body afterwards, and a client that takes that response as the end of the
exchange stops uploading (Courier closes the connection then). The nginx locations that do read
the body first (proxy, mirror, njs) keep it, in memory or in a temporary file.

    upload_sink.py PORT
"""
import socket
import sys
import threading

HEAD_LIMIT = 64 * 1024


class Connection:
    def __init__(self, sock):
        self.sock = sock
        self.pending = bytearray()  # bytes read past what has been parsed
        self.buffer = bytearray(1 << 20)
        self.view = memoryview(self.buffer)

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        self.pending += data

    def line(self):
        while (end := self.pending.find(b"\r\n")) < 0:
            if len(self.pending) > HEAD_LIMIT:
                raise ValueError("line too long")
            self.fill()
        text = bytes(self.pending[:end])
        del self.pending[:end + 2]
        return text

    def head(self):
        """The request line and the fields (names lowercased), or None when the client closed."""
        try:
            while (end := self.pending.find(b"\r\n\r\n")) < 0:
                if len(self.pending) > HEAD_LIMIT:
                    raise ValueError("head too long")
                self.fill()
        except ConnectionError:
            return None
        lines = bytes(self.pending[:end]).decode("latin-1").split("\r\n")
        del self.pending[:end + 4]
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        return lines[0], fields

    def discard(self, count):
        """Reads and drops `count` body bytes."""
        taken = min(count, len(self.pending))
        del self.pending[:taken]
        count -= taken
        while count > 0:
            read = self.sock.recv_into(self.view[:min(count, len(self.buffer))])
            if read == 0:
                raise ConnectionError("closed in the body")
            count -= read

    def chunked(self):
        total = 0
        while True:
            size = int(self.line().split(b";")[0].strip(), 16)
            if size == 0:
                while self.line():  # trailer fields, up to the empty line
                    pass
                return total
            self.discard(size)
            total += size
            if self.line():
                raise ValueError("no CRLF after a chunk")

    def serve(self):
        try:
            while (request := self.head()) is not None:
                request_line, fields = request
                if "100-continue" in fields.get("expect", "").lower():
                    self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                if "chunked" in fields.get("transfer-encoding", "").lower():
                    received = self.chunked()
                else:
                    received = int(fields.get("content-length", "0"))
                    self.discard(received)
                body = str(received).encode()
                closing = fields.get("connection", "").lower() == "close" or request_line.endswith("HTTP/1.0")
                self.sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s\r\n%s"
                                  % (len(body), b"Connection: close\r\n" if closing else b"", body))
                if closing:
                    break
        except (ConnectionError, ValueError, OSError):
            pass
        finally:
            self.sock.close()


def main():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(sys.argv[1])))
    listener.listen(64)
    while True:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A thread per connection: a client's idle keep-alive connection must not hold up the next.
        threading.Thread(target=Connection(sock).serve, daemon=True).start()


if __name__ == "__main__":
    main()
