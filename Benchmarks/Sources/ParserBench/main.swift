// Parser micro-benchmarks: Courier's HTTP/1 response parser next to nodejs's http-parser
// (Debian's libhttp-parser-dev) on the same bytes. Two inputs: an nginx-like response head
// with a 100-byte body, parsed again and again; and a 1 MiB body in 4 KiB chunks.
//
//   parser-bench                      JSON: nanoseconds per response and MB/s, each parser and input
//   parser-bench count PARSER N       parses the head + 100 B input N times with PARSER (courier or
//                                     http-parser) and prints {"requests": N}: for run.py
//                                     --instructions, which counts two such runs' instructions
//
// The timed parsers take turns: rounds of each, the order swapped every round, and the figure
// is each parser's fastest round (the median is given too). On this VM one long run of each,
// one after the other, put either parser ahead by up to 1.7x depending on which one a slow
// stretch of the machine fell on.

import BenchSupport
import CHTTPParser
import CourierCore
import CourierHTTP1
import Foundation

let head = """
HTTP/1.1 200 OK\r
Server: nginx/1.22.1\r
Date: Sun, 22 Nov 2026 01:00:00 GMT\r
Content-Type: application/octet-stream\r
Content-Length: 100\r
Last-Modified: Sun, 22 Nov 2026 00:00:00 GMT\r
Connection: keep-alive\r
ETag: "6740c9f0-64"\r
Accept-Ranges: bytes\r
\r

"""
let smallResponse: [UInt8] = Array(head.utf8) + [UInt8](repeating: 0x61, count: 100)

var chunkedResponse: [UInt8] = Array("HTTP/1.1 200 OK\r\nServer: nginx\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
let chunk = [UInt8](repeating: 0x62, count: 4096)
for _ in 0..<256 {
    chunkedResponse += Array("1000\r\n".utf8) + chunk + Array("\r\n".utf8)
}
chunkedResponse += Array("0\r\n\r\n".utf8)

/// Parses `input` `iterations` times with Courier's parser; returns seconds.
func courier(_ input: [UInt8], iterations: Int) -> Double {
    var parser = HTTP1ResponseParser()
    var bodyBytes = 0
    let start = ContinuousClock.now
    input.withUnsafeBytes { bytes in
        for _ in 0..<iterations {
            parser.expectResponse(to: .get)
            var offset = 0
            parsing: while true {
                guard let step = try? parser.next(UnsafeRawBufferPointer(rebasing: bytes[offset...])) else { fatalError("parse error") }
                offset += step.consumed
                switch step.event {
                case .body(let range): bodyBytes += range.count
                case .end: break parsing
                case .head, .informational, .none: break
                }
            }
        }
    }
    let elapsed = seconds(ContinuousClock.now - start)
    precondition(bodyBytes > 0)
    return elapsed
}

/// Parses `input` `iterations` times with http-parser, counting header and body bytes in its
/// callbacks; returns seconds.
func httpParser(_ input: [UInt8], iterations: Int) -> Double {
    var settings = http_parser_settings()
    settings.on_body = { parser, _, length in
        parser!.pointee.data.assumingMemoryBound(to: Int.self).pointee += length
        return 0
    }
    settings.on_header_field = { _, _, _ in 0 }
    settings.on_header_value = { _, _, _ in 0 }
    settings.on_message_complete = { _ in 0 }
    var parser = http_parser()
    var bodyBytes = 0
    let start = ContinuousClock.now
    withUnsafeMutablePointer(to: &bodyBytes) { counter in
        input.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { chars in
                for _ in 0..<iterations {
                    http_parser_init(&parser, HTTP_RESPONSE)
                    parser.data = UnsafeMutableRawPointer(counter)
                    let parsed = http_parser_execute(&parser, &settings, chars.baseAddress, chars.count)
                    precondition(parsed == chars.count, "http-parser stopped early")
                }
            }
        }
    }
    let elapsed = seconds(ContinuousClock.now - start)
    precondition(bodyBytes > 0)
    return elapsed
}

let arguments = CommandLine.arguments
if arguments.count == 4, arguments[1] == "count", let count = Int(arguments[3]), count > 0 {
    switch arguments[2] {
    case "courier": _ = courier(smallResponse, iterations: count)
    case "http-parser": _ = httpParser(smallResponse, iterations: count)
    default: fatalError("usage: parser-bench count courier|http-parser N")
    }
    print("{\"requests\": \(count)}")
    exit(0)
}

/// The rounds of each parser, taking turns.
let rounds = 7
var results: [String: Any] = [:]
for (name, input, iterations) in [("head+100B", smallResponse, 400_000), ("chunked 1MiB", chunkedResponse, 400)] {
    // Warm up, then measure: `rounds` rounds of each, a round `iterations / rounds` parses.
    _ = courier(input, iterations: iterations / 10)
    _ = httpParser(input, iterations: iterations / 10)
    let perRound = iterations / rounds
    var courierRounds: [Double] = []
    var parserRounds: [Double] = []
    for round in 0..<rounds {
        if round % 2 == 0 {
            courierRounds.append(courier(input, iterations: perRound))
            parserRounds.append(httpParser(input, iterations: perRound))
        } else {
            parserRounds.append(httpParser(input, iterations: perRound))
            courierRounds.append(courier(input, iterations: perRound))
        }
    }
    let bytes = Double(input.count * perRound)
    func figures(_ seconds: [Double]) -> [String: Double] {
        let sorted = seconds.sorted()
        return [
            "nsPerResponse": sorted[0] / Double(perRound) * 1e9,
            "medianNsPerResponse": sorted[sorted.count / 2] / Double(perRound) * 1e9,
            "MBps": bytes / sorted[0] / 1e6,
        ]
    }
    results[name] = ["inputBytes": input.count, "rounds": rounds, "courier": figures(courierRounds), "http-parser": figures(parserRounds)]
}
let data = try JSONSerialization.data(withJSONObject: results, options: [.sortedKeys])
print(String(decoding: data, as: UTF8.self))
