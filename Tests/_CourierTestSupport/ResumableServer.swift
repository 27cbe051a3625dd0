import CourierSync
import Foundation
import Glibc

/// An HTTP/1.1 server on 127.0.0.1 that serves one reproducible body at every path, with what a
/// resumable download meets on the way: validators, `Accept-Ranges`, `Range` and `If-Range`, and
/// faults on demand (a body cut short, a pause the test releases, a 416, a 206 for the wrong
/// range, requests dropped unanswered). Several requests may share a connection; every request
/// is recorded with the answer it got.
///
/// Ranges are read as `bytes=FIRST-…`: a 206 always runs from FIRST to the end of the body.
public final class ResumableServer: Sendable {
    /// The validator that responses carry.
    public enum Validator: String, Sendable, CaseIterable {
        /// A strong `ETag`, with a `Last-Modified` beside it.
        case strongETag
        /// Only a weak `ETag` (`W/"…"`).
        case weakETag
        /// Only `Last-Modified`.
        case lastModified
        /// No validator at all.
        case absent
    }

    /// How a body is cut short.
    public enum Cut: Sendable {
        /// A TCP reset, a moment after the last write so the bytes already written reach the
        /// client first.
        case reset
        /// A plain close: the client reads every byte written, then end of stream.
        case close
    }

    /// What the server does with requests; may change while it runs (``update(_:)``).
    public struct Behaviour: Sendable {
        public var validator: Validator
        /// Whether 200s and 206s carry `Accept-Ranges: bytes`.
        public var acceptRanges: Bool
        /// Whether `Range` is answered with a 206; if not, every answer is a 200 with the body.
        public var honoursRange: Bool
        /// Whether `If-Range` is checked; a validator that does not match gets a 200 with the body.
        public var honoursIfRange: Bool
        /// Microseconds slept after each 64 KiB write.
        public var chunkDelay: UInt32

        public init(validator: Validator = .strongETag, acceptRanges: Bool = true, honoursRange: Bool = true, honoursIfRange: Bool = true, chunkDelay: UInt32 = 0) {
            self.validator = validator
            self.acceptRanges = acceptRanges
            self.honoursRange = honoursRange
            self.honoursIfRange = honoursIfRange
            self.chunkDelay = chunkDelay
        }
    }

    /// A request as received, and how it was answered.
    public struct Request: Sendable {
        public var method: String
        public var target: String
        /// The `Range` and `If-Range` fields, as sent.
        public var range: String?
        public var ifRange: String?
        /// The connection's index (0 for the first accepted).
        public var connection: Int
        /// The status answered; 0 when the request was dropped unanswered.
        public var status: Int
        /// The offset in the body of the first byte sent (0 for a 200).
        public var firstByte: Int
    }

    /// The body served at every path.
    public let body: [UInt8]
    /// The body's SHA-256, lower-case hexadecimal.
    public let sha256: String
    private let core: Core
    private let server: ScriptedServer

    /// Starts the server with a body of `size` bytes made by SplitMix64 from `seed`.
    public init(size: Int = 4 * 1024 * 1024, seed: UInt64 = 0xC0FF_EE00_5EED, behaviour: Behaviour = Behaviour()) throws {
        var generator = SplitMix64(seed: seed)
        var words = [UInt64]()
        words.reserveCapacity(size / 8 + 1)
        for _ in 0...(size / 8) { words.append(generator.next().littleEndian) }
        // Copied at once: a byte-by-byte loop is slow in a debug build.
        let bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            words.withUnsafeBytes { raw in
                UnsafeMutableRawBufferPointer(buffer).copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[0..<size]))
            }
            initialized = size
        }
        let core = Core(body: bytes, seed: seed, behaviour: behaviour)
        self.body = bytes
        self.sha256 = SHA256.hex(bytes)
        self.core = core
        self.server = try ScriptedServer { connection in
            while let request = connection.readRequest(timeout: 30) {
                guard core.serve(request, on: connection) else { return }
            }
        }
    }

    deinit { stop() }

    public var port: Int { server.port }

    /// A URL on this server; every path serves the same body.
    public func url(_ path: String = "/file.bin") -> URL { server.url(path) }

    /// Connections accepted so far.
    public var connectionCount: Int { server.connectionCount }

    /// The requests received so far, in order.
    public var requests: [Request] { core.state.withLock { $0.requests } }

    /// The strong ETag responses carry now (in ``Validator/strongETag`` mode), quotes included.
    public var strongETag: String { core.state.withLock { core.strongETag($0.generation) } }

    /// The `Last-Modified` date responses carry now.
    public var lastModified: String { core.state.withLock { core.lastModified($0.generation) } }

    /// Changes the behaviour for the requests that follow.
    public func update(_ change: (inout Behaviour) -> Void) {
        core.state.withLock { change(&$0.behaviour) }
    }

    /// Gives the entity new validators (ETag and Last-Modified); the body stays the same, but an
    /// `If-Range` with the old ones no longer matches.
    public func changeValidators() {
        core.state.withLock { $0.generation += 1 }
    }

    /// Cuts the next bodies short, one offset per 200 or 206 with a body, in order: the head and
    /// the body up to `offset` (counted from the start of the body, whatever range is sent),
    /// then `cut`.
    public func cut(at offsets: [Int], with cut: Cut = .reset) {
        core.state.withLock { state in state.cuts += offsets.map { (offset: $0, cut: cut) } }
    }

    /// Holds the next body after `offset` bytes of it (counted from the start of the body)
    /// until ``release()`` or ``stop()``; pauses are used one per 200 or 206 with a body.
    public func pause(at offset: Int) {
        core.state.withLock { $0.pauses.append(offset) }
    }

    /// Lets a held response go on (no effect when none is held).
    public func release() {
        core.state.withLock { state in
            if state.paused { state.releaseRequested = true }
        }
    }

    /// Answers the next ranged request (one the server would answer with a 206) with a 416.
    public func answer416ToNextRange() {
        core.state.withLock { $0.answer416 = true }
    }

    /// Answers the next ranged request with a 206 whose `Content-Range` starts before the
    /// requested offset (at half of it), with the bytes that range names.
    public func answerWrongContentRangeToNextRange() {
        core.state.withLock { $0.wrongContentRange = true }
    }

    /// While on, every request is read and its connection closed with no answer at all.
    public func dropRequests(_ drop: Bool) {
        core.state.withLock { $0.dropping = drop }
    }

    /// Stops the server: held responses go on (into closed connections) and end.
    public func stop() {
        core.state.withLock { $0.stopped = true }
        server.stop()
    }

    /// The state the connection threads share with the test.
    private final class Core: Sendable {
        struct State {
            var behaviour: Behaviour
            var generation = 0
            var cuts: [(offset: Int, cut: Cut)] = []
            var pauses: [Int] = []
            var answer416 = false
            var wrongContentRange = false
            var dropping = false
            var requests: [Request] = []
            var paused = false
            var releaseRequested = false
            var stopped = false
        }

        /// How one response is sent.
        struct Plan {
            var status: Int
            var reason: String
            var headers: [(String, String)]
            var firstByte: Int
            var sendsBody: Bool
            var cut: (offset: Int, cut: Cut)?
            var pause: Int?
            var chunkDelay: UInt32
        }

        let body: [UInt8]
        let seed: UInt64
        let state: Mutex<State>

        init(body: [UInt8], seed: UInt64, behaviour: Behaviour) {
            self.body = body
            self.seed = seed
            self.state = Mutex(State(behaviour: behaviour))
        }

        func strongETag(_ generation: Int) -> String {
            "\"resumable-\(String(seed, radix: 16))-\(generation)\""
        }

        /// A fixed date that moves by a minute with every generation.
        func lastModified(_ generation: Int) -> String {
            let minute = generation % 60
            return "Tue, 01 Apr 2025 10:\(minute < 10 ? "0" : "")\(minute):00 GMT"
        }

        /// Answers one request; false when the connection is done with.
        func serve(_ request: ScriptedRequest, on connection: ScriptedConnection) -> Bool {
            guard let plan = decide(request, connection: connection.index) else {
                connection.close()
                return false
            }
            var head = "HTTP/1.1 \(plan.status) \(plan.reason)\r\n"
            for (name, value) in plan.headers { head += "\(name): \(value)\r\n" }
            connection.write(head + "\r\n")
            guard plan.sendsBody else { return request.header("Connection")?.lowercased() != "close" }
            let end = plan.cut.map { min(max($0.offset, plan.firstByte), body.count) } ?? body.count
            var pause = plan.pause
            var offset = plan.firstByte
            if let held = pause, held <= offset {
                hold()
                pause = nil
            }
            while offset < end {
                var next = min(offset + 64 * 1024, end)
                if let held = pause, held > offset, held < next { next = held }
                connection.write(Array(body[offset..<next]))
                offset = next
                if let held = pause, held == offset {
                    hold()
                    pause = nil
                }
                if plan.chunkDelay > 0 { usleep(plan.chunkDelay) }
            }
            switch plan.cut?.cut {
            case .reset?:
                usleep(100_000)
                connection.reset()
                return false
            case .close?:
                connection.close()
                return false
            case nil:
                return request.header("Connection")?.lowercased() != "close"
            }
        }

        /// Decides the answer and records the request; nil to drop it unanswered.
        private func decide(_ request: ScriptedRequest, connection: Int) -> Plan? {
            state.withLock { state -> Plan? in
                let range = request.header("Range")
                let ifRange = request.header("If-Range")
                var record = Request(method: request.method, target: request.target, range: range, ifRange: ifRange, connection: connection, status: 0, firstByte: 0)
                if state.dropping {
                    state.requests.append(record)
                    return nil
                }
                let behaviour = state.behaviour
                let length = body.count
                let tag = strongETag(state.generation)
                let date = lastModified(state.generation)
                var headers: [(String, String)] = [("Content-Type", "application/octet-stream")]
                switch behaviour.validator {
                case .strongETag:
                    headers += [("ETag", tag), ("Last-Modified", date)]
                case .weakETag:
                    headers.append(("ETag", "W/" + tag))
                case .lastModified:
                    headers.append(("Last-Modified", date))
                case .absent:
                    break
                }
                if behaviour.acceptRanges { headers.append(("Accept-Ranges", "bytes")) }

                var status = 200
                var firstByte = 0
                if behaviour.honoursRange, let first = range.flatMap(Self.rangeStart) {
                    var matches = true
                    if behaviour.honoursIfRange, let ifRange {
                        // A weak ETag never matches; a date matches only as sent.
                        switch behaviour.validator {
                        case .strongETag: matches = ifRange == tag || ifRange == date
                        case .lastModified: matches = ifRange == date
                        case .weakETag, .absent: matches = false
                        }
                    }
                    if matches {
                        if state.answer416 || first >= length {
                            state.answer416 = false
                            status = 416
                        } else if state.wrongContentRange {
                            state.wrongContentRange = false
                            status = 206
                            firstByte = first > 0 ? first / 2 : 1
                        } else {
                            status = 206
                            firstByte = first
                        }
                    }
                }
                let isHead = request.method == "HEAD"
                var plan = Plan(status: status, reason: "OK", headers: headers, firstByte: firstByte, sendsBody: false, cut: nil, pause: nil, chunkDelay: behaviour.chunkDelay)
                switch status {
                case 206:
                    plan.reason = "Partial Content"
                    plan.headers += [("Content-Range", "bytes \(firstByte)-\(length - 1)/\(length)"), ("Content-Length", "\(length - firstByte)")]
                case 416:
                    plan.reason = "Range Not Satisfiable"
                    plan.headers += [("Content-Range", "bytes */\(length)"), ("Content-Length", "0")]
                default:
                    plan.headers.append(("Content-Length", "\(length)"))
                }
                if status != 416, !isHead {
                    plan.sendsBody = true
                    if !state.cuts.isEmpty { plan.cut = state.cuts.removeFirst() }
                    if !state.pauses.isEmpty { plan.pause = state.pauses.removeFirst() }
                }
                record.status = status
                record.firstByte = firstByte
                state.requests.append(record)
                return plan
            }
        }

        /// Waits, holding the response, until the test releases it or the server stops
        /// (at most a minute).
        private func hold() {
            state.withLock { state in
                state.paused = true
                state.releaseRequested = false
            }
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline, !state.withLock({ $0.stopped || $0.releaseRequested }) {
                usleep(2000)
            }
            state.withLock { state in
                state.paused = false
                state.releaseRequested = false
            }
        }

        /// FIRST of `bytes=FIRST-…` (the first range of a list); nil for a suffix range or
        /// anything else.
        static func rangeStart(_ value: String) -> Int? {
            let trimmed = value.trimmingCharacters(in: .whitespaces)
            guard trimmed.lowercased().hasPrefix("bytes=") else { return nil }
            guard let spec = trimmed.dropFirst(6).split(separator: ",").first else { return nil }
            let bounds = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
            guard bounds.count == 2, let first = Int(bounds[0].trimmingCharacters(in: .whitespaces)), first >= 0 else { return nil }
            return first
        }
    }
}
