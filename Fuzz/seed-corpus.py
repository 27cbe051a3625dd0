#!/usr/bin/env python3
"""Writes the seed corpora under Corpus/ from the HTTP/1 transcript tests and a few hand-made
inputs for the other targets. Run again after adding transcripts."""
import glob
import hashlib
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
TRANSCRIPTS = os.path.join(HERE, "..", "Tests", "CourierHTTP1Tests", "Transcripts")


def unescape(text):
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = text[i + 1]
        if n == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
            continue
        out += {"r": b"\r", "n": b"\n", "t": b"\t", "0": b"\0", "s": b" ", "\\": b"\\"}[n]
        i += 2
    return bytes(out)


def transcripts():
    for path in sorted(glob.glob(os.path.join(TRANSCRIPTS, "*.transcript"))):
        case = None
        section = None
        for line in open(path, encoding="utf-8").read().split("\n"):
            if line.startswith("=== "):
                if case:
                    yield case
                case = {"method": "GET", "options": "", "input": b""}
                section = "preamble"
            elif case is None:
                continue
            elif line == "--- input":
                section = "input"
            elif line == "--- events":
                section = "events"
            elif section == "preamble" and line.startswith("method: "):
                case["method"] = line[8:]
            elif section == "preamble" and line.startswith("options: "):
                case["options"] = line[9:]
            elif section == "input":
                if line.startswith("@repeat "):
                    count, unit = line[8:].split(" ", 1)
                    case["input"] += unescape(unit) * int(count)
                elif line.endswith("\\c"):
                    case["input"] += unescape(line[:-2])
                else:
                    case["input"] += unescape(line) + b"\r\n"
        if case:
            yield case


def write(target, data):
    folder = os.path.join(HERE, "Corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seed-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as handle:
        handle.write(data)


METHODS = {"GET": 0, "HEAD": 1, "CONNECT": 2, "POST": 3}
for case in transcripts():
    if len(case["input"]) > 20000:
        continue
    flags = METHODS.get(case["method"], 0)
    if "allowsBareLineFeed" in case["options"]:
        flags |= 0x04
    if "allowsObsoleteLineFolding" in case["options"]:
        flags |= 0x08
    write("http1-response", bytes([flags, 128, 128]) + case["input"])
    if b"chunked" in case["input"].lower() and b"\r\n\r\n" in case["input"]:
        write("http1-chunked", bytes([flags & 0x0C, 128]) + case["input"].split(b"\r\n\r\n", 1)[1])

for seed in [b"GET\0/\0example.test\0Accept\0*/*", b"POST\0/a?b=c\0127.0.0.1:8080\0Content-Type\0text/plain\0X\0y",
             b"GET\0/\0h\0X-Injected\0a\r\nB: c", b"G T\0/\0h", b"GET\0/ x\0h", b"GET\0/\0h\0Host\0evil\0Content-Length\05"]:
    write("request-encoding", seed)

for seed in [b"http://127.0.0.1:8080/path?q=1\nGET\nAccept: */*", b"https://[::1]:8443/\nPOST\nContent-Type: text/plain",
             b"http://localhost/a%20b#frag\nHEAD", b"ftp://example.invalid/\nGET", b"http://127.0.0.1/\nGET\nX: a\rb",
             b"http:///nohost\nGET", b"https://user:pass@127.0.0.1/\nPUT\nAuthorization: Basic abc"]:
    write("url-request", seed)


def frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


for seed in [
    frame(4, 1, 0, b""),                                            # SETTINGS ACK
    frame(1, 5, 1, b"\x88"),                                         # HEADERS :status 200, END_STREAM
    frame(1, 4, 3, b"\x88") + frame(0, 1, 3, b"hello"),              # HEADERS then DATA
    frame(1, 4, 1, b"\x88") + frame(0, 0, 1, b"ab") + frame(1, 5, 1, b"\x40\x01x\x01y"),  # trailers
    frame(6, 0, 0, b"12345678"),                                     # PING
    frame(7, 0, 0, b"\x00\x00\x00\x01\x00\x00\x00\x00"),             # GOAWAY
    frame(3, 0, 1, b"\x00\x00\x00\x08"),                             # RST_STREAM CANCEL
    frame(8, 0, 0, b"\x00\x01\x00\x00"),                             # WINDOW_UPDATE
    frame(4, 0, 0, b"\x00\x03\x00\x00\x00\x02"),                     # SETTINGS MAX_CONCURRENT_STREAMS 2
]:
    write("http2-frames", seed)

for seed in [b"\x00" + bytes([0x16, 3, 3, 0, 4, 2, 0, 0, 0]), b"\x00" + bytes([0x15, 3, 3, 0, 2, 2, 40]),
             b"\x80" + bytes([0x17, 3, 3, 0, 8]) + b"ABCDEFGH", b"\x80" + bytes([0x15, 3, 3, 0, 2, 1, 0]),
             b"\x00HTTP/1.1 400 Bad Request\r\n\r\n"]:
    write("tls-records", seed)


# Content decoding: byte 0 picks the codings (see FuzzContentDecoding/main.swift), byte 1 the piece
# sizes, then the coded body. gzip and deflate come from Python's zlib; Brotli from Debian's
# libbrotlienc through ctypes, skipped when it is not installed.
import ctypes
import ctypes.util
import zlib


def deflate(data, window_bits, level=6):
    compressor = zlib.compressobj(level, zlib.DEFLATED, window_bits)
    return compressor.compress(data) + compressor.flush()


def gzip_(data):
    return deflate(data, 16 + 15)  # gzip wrapper, 32 KiB window


def zlib_(data):
    return deflate(data, 15)  # zlib wrapper (RFC 1950)


def raw(data):
    return deflate(data, -15)  # no wrapper (RFC 1951)


def brotli_encoder():
    name = ctypes.util.find_library("brotlienc")
    if not name:
        return None
    library = ctypes.CDLL(name)
    library.BrotliEncoderMaxCompressedSize.restype = ctypes.c_size_t
    library.BrotliEncoderMaxCompressedSize.argtypes = [ctypes.c_size_t]
    library.BrotliEncoderCompress.restype = ctypes.c_int
    library.BrotliEncoderCompress.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p,
                                              ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p]

    def compress(data, quality=5):
        size = ctypes.c_size_t(max(library.BrotliEncoderMaxCompressedSize(len(data)), 64))
        out = ctypes.create_string_buffer(size.value)
        # Window 22 (4 MiB, the encoder's default); mode 0 is generic.
        if not library.BrotliEncoderCompress(quality, 22, 0, len(data), data, ctypes.byref(size), out):
            raise RuntimeError("BrotliEncoderCompress failed")
        return out.raw[:size.value]
    return compress


PAGE = b"".join(b"Line %d: the quick brown fox jumps over the lazy dog.\n" % n for n in range(40))
SAMPLES = [b"", b"hello", PAGE]
# Selectors: 0 gzip, 1 deflate, 2 br, 3 "gzip, br", 4 "deflate, gzip", 5 "br, deflate", 6 "gzip, gzip", 7 none.
for index, sample in enumerate(SAMPLES):
    pieces = [0, 7, 12][index]  # one byte at a time, up to 128 bytes, up to 4 KiB
    write("content-decoding", bytes([0, pieces]) + gzip_(sample))
    write("content-decoding", bytes([1, pieces]) + zlib_(sample))
    write("content-decoding", bytes([1, pieces]) + raw(sample))
    write("content-decoding", bytes([4, pieces]) + gzip_(zlib_(sample)))
    write("content-decoding", bytes([6, pieces]) + gzip_(gzip_(sample)))
    write("content-decoding", bytes([7, pieces]) + sample)
write("content-decoding", bytes([0, 3]) + gzip_(b"first member\n") + gzip_(PAGE))  # concatenated members
write("content-decoding", bytes([0, 5]) + gzip_(bytes(200000)))  # zeros: a ratio near 1000:1
brotli = brotli_encoder()
if brotli:
    for index, sample in enumerate(SAMPLES):
        pieces = [0, 7, 12][index]
        write("content-decoding", bytes([2, pieces]) + brotli(sample))
        write("content-decoding", bytes([3, pieces]) + brotli(gzip_(sample)))
        write("content-decoding", bytes([5, pieces]) + raw(brotli(sample)))
    write("content-decoding", bytes([2, 9]) + brotli(bytes(4 << 20), quality=11))  # a small Brotli bomb
