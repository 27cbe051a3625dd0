import CourierCore
import CourierTransport
import Testing
import _CourierTestSupport

// The SOCKS5 client handshake (RFC 1928, RFC 1929) as a transcript: the proxy's bytes in, the
// messages to send and where the tunnel starts out. Every exchange is fed whole, one byte at a
// time and in seeded random slices, and must come out the same; bytes after the CONNECT reply
// must stay unread.

/// What a handshake did with a proxy's bytes, independent of how they were sliced.
struct SOCKS5Outcome: Sendable, Equatable, CustomStringConvertible {
    /// The messages the handshake asked to write, in order.
    var sent: [[UInt8]] = []
    /// Where in the input the CONNECT reply ended, once established.
    var establishedAt: Int?
    /// The error thrown, if any.
    var error: SOCKS5Error?

    var description: String {
        "sent \(sent), established at \(establishedAt.map { "\($0)" } ?? "-"), error \(error.map { "\($0)" } ?? "-")"
    }
}

/// One call's result: the step and how many bytes it used.
struct SOCKS5Received: Sendable, Equatable {
    var step: SOCKS5Handshake.Step
    var consumed: Int
}

/// Calls `receive` on a slice, turning the typed error into a value.
private func receive(_ handshake: inout SOCKS5Handshake, _ bytes: ArraySlice<UInt8>) -> Result<SOCKS5Received, SOCKS5Error> {
    bytes.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) -> Result<SOCKS5Received, SOCKS5Error> in
        do throws(SOCKS5Error) {
            let result = try handshake.receive(buffer)
            return .success(SOCKS5Received(step: result.step, consumed: result.consumed))
        } catch {
            return .failure(error)
        }
    }
}

/// The pieces `0..<count` falls into when cut at `cuts` (out-of-range and repeated cuts ignored).
private func pieces(_ count: Int, cuts: [Int]) -> [Range<Int>] {
    let bounds = [0] + Set(cuts.filter { $0 > 0 && $0 < count }).sorted() + [count]
    return zip(bounds, bounds.dropFirst()).compactMap { $0 < $1 ? $0..<$1 : nil }
}

/// Feeds `input` to a copy of `start` in the pieces `cuts` makes, as a driver would: after a
/// `.send` it calls again with the rest of the piece, after `.needMore` it moves to the next
/// piece, and it stops at `.established` or an error.
private func drive(_ start: SOCKS5Handshake, _ input: [UInt8], cuts: [Int]) -> SOCKS5Outcome {
    var handshake = start
    var outcome = SOCKS5Outcome()
    for piece in pieces(input.count, cuts: cuts) {
        var offset = piece.lowerBound
        var needsMore = false
        while !needsMore {
            switch receive(&handshake, input[offset..<piece.upperBound]) {
            case .failure(let error):
                outcome.error = error
                return outcome
            case .success(let received):
                #expect(received.consumed >= 0 && received.consumed <= piece.upperBound - offset, "consumed bytes it was not given")
                offset += received.consumed
                switch received.step {
                case .needMore:
                    #expect(offset == piece.upperBound, "asked for more but left bytes unread")
                    needsMore = true
                case .send(let bytes):
                    outcome.sent.append(bytes)
                    if outcome.sent.count > 2 {
                        Issue.record("more than two messages to send")
                        return outcome
                    }
                case .established:
                    #expect(handshake.isEstablished)
                    outcome.establishedAt = offset
                    return outcome
                }
            }
        }
    }
    return outcome
}

/// A few random cuts of `0..<count`.
private func randomCuts(_ count: Int, _ random: inout SplitMix64) -> [Int] {
    guard count > 1 else { return [] }
    return (0..<random.inRange(1...Swift.min(count - 1, 8))).map { _ in random.inRange(1...(count - 1)) }
}

// MARK: - Fixtures

private let alice = ProxyServer.Credentials(user: "alice", password: "s3cret")
/// `01 05 alice 06 s3cret`.
private let aliceRequest: [UInt8] = [0x01, 0x05] + Array("alice".utf8) + [0x06] + Array("s3cret".utf8)
/// CONNECT example.com:443 by name.
private let connectExample: [UInt8] = [0x05, 0x01, 0x00, 0x03, 11] + Array("example.com".utf8) + [0x01, 0xBB]
/// What a tunnel's first bytes might be; they must never be consumed.
private let tunnelBytes: [UInt8] = Array("HTTP/1.1 200 OK\r\n".utf8)

private let chooseNone: [UInt8] = [0x05, 0x00]
private let chooseUserPassword: [UInt8] = [0x05, 0x02]
private let authenticated: [UInt8] = [0x01, 0x00]
/// A success bound to 127.0.0.1:1080.
private let boundIPv4: [UInt8] = [0x05, 0x00, 0x00, 0x01, 127, 0, 0, 1, 0x04, 0x38]
/// A success bound to [2001:db8::1]:80.
private let boundIPv6: [UInt8] = [0x05, 0x00, 0x00, 0x04, 0x20, 0x01, 0x0D, 0xB8] + [UInt8](repeating: 0, count: 11) + [0x01, 0x00, 0x50]
/// A success bound to proxy.example:8080.
private let boundName: [UInt8] = [0x05, 0x00, 0x00, 0x03, 13] + Array("proxy.example".utf8) + [0x1F, 0x90]
/// A success with an empty bound name.
private let boundEmptyName: [UInt8] = [0x05, 0x00, 0x00, 0x03, 0, 0x00, 0x00]
/// A success with the longest bound name.
private let boundLongestName: [UInt8] = [0x05, 0x00, 0x00, 0x03, 255] + [UInt8](repeating: UInt8(ascii: "a"), count: 255) + [0x00, 0x50]

private func makeHandshake(
    _ credentials: ProxyServer.Credentials?, destination: SOCKS5Destination = .domain("example.com"), port: UInt16 = 443
) throws -> SOCKS5Handshake {
    try SOCKS5Handshake(destination: destination, port: port, credentials: credentials)
}

/// One exchange: the configuration, the proxy's bytes and what must come of them.
struct SOCKS5Exchange: Sendable, CustomStringConvertible {
    var description: String
    var credentials: ProxyServer.Credentials?
    var input: [UInt8]
    var expected: SOCKS5Outcome

    static let all: [SOCKS5Exchange] = [
        SOCKS5Exchange(
            description: "no credentials, bound IPv4", credentials: nil, input: chooseNone + boundIPv4 + tunnelBytes,
            expected: SOCKS5Outcome(sent: [connectExample], establishedAt: 12)),
        SOCKS5Exchange(
            description: "credentials offered, proxy needs none, bound IPv6", credentials: alice, input: chooseNone + boundIPv6 + tunnelBytes,
            expected: SOCKS5Outcome(sent: [connectExample], establishedAt: 24)),
        SOCKS5Exchange(
            description: "user name and password, bound name", credentials: alice,
            input: chooseUserPassword + authenticated + boundName + tunnelBytes,
            expected: SOCKS5Outcome(sent: [aliceRequest, connectExample], establishedAt: 24)),
        SOCKS5Exchange(
            description: "empty bound name", credentials: nil, input: chooseNone + boundEmptyName + tunnelBytes,
            expected: SOCKS5Outcome(sent: [connectExample], establishedAt: 9)),
        SOCKS5Exchange(
            description: "longest bound name", credentials: alice, input: chooseUserPassword + authenticated + boundLongestName + tunnelBytes,
            expected: SOCKS5Outcome(sent: [aliceRequest, connectExample], establishedAt: 4 + 262)),
        SOCKS5Exchange(
            description: "reserved byte not zero is ignored", credentials: nil,
            input: chooseNone + [0x05, 0x00, 0xAA, 0x01, 10, 0, 0, 1, 0x00, 0x50],
            expected: SOCKS5Outcome(sent: [connectExample], establishedAt: 12)),
        SOCKS5Exchange(
            description: "CONNECT reply cut short", credentials: nil, input: chooseNone + [0x05, 0x00, 0x00, 0x03, 10] + Array("abc".utf8),
            expected: SOCKS5Outcome(sent: [connectExample])),
        SOCKS5Exchange(
            description: "nothing after the method selection", credentials: alice, input: chooseUserPassword,
            expected: SOCKS5Outcome(sent: [aliceRequest])),

        // The proxy is not a SOCKS5 proxy, or refuses.
        SOCKS5Exchange(
            description: "an HTTP proxy answers", credentials: nil, input: Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8),
            expected: SOCKS5Outcome(error: .notSOCKS5(version: 0x48))),
        SOCKS5Exchange(
            description: "a SOCKS4 reply", credentials: nil, input: [0x00, 0x5A, 0x00, 0x50, 127, 0, 0, 1],
            expected: SOCKS5Outcome(error: .notSOCKS5(version: 0x00))),
        SOCKS5Exchange(
            description: "no acceptable method, credentials offered", credentials: alice, input: [0x05, 0xFF],
            expected: SOCKS5Outcome(error: .noAcceptableMethod)),
        SOCKS5Exchange(
            description: "no acceptable method, no credentials", credentials: nil, input: [0x05, 0xFF],
            expected: SOCKS5Outcome(error: .credentialsRequired)),
        SOCKS5Exchange(
            description: "user name and password chosen but not offered", credentials: nil, input: chooseUserPassword + authenticated,
            expected: SOCKS5Outcome(error: .unexpectedMethod(0x02))),
        SOCKS5Exchange(
            description: "GSSAPI chosen", credentials: alice, input: [0x05, 0x01],
            expected: SOCKS5Outcome(error: .unexpectedMethod(0x01))),
        SOCKS5Exchange(
            description: "a private method chosen", credentials: alice, input: [0x05, 0x80],
            expected: SOCKS5Outcome(error: .unexpectedMethod(0x80))),
        SOCKS5Exchange(
            description: "authentication reply with version 5", credentials: alice, input: chooseUserPassword + [0x05, 0x00] + boundIPv4,
            expected: SOCKS5Outcome(sent: [aliceRequest], error: .badAuthenticationVersion(0x05))),
        SOCKS5Exchange(
            description: "credentials rejected", credentials: alice, input: chooseUserPassword + [0x01, 0x01] + boundIPv4,
            expected: SOCKS5Outcome(sent: [aliceRequest], error: .authenticationFailed(status: 0x01))),
        SOCKS5Exchange(
            description: "credentials rejected with 0xFF", credentials: alice, input: chooseUserPassword + [0x01, 0xFF],
            expected: SOCKS5Outcome(sent: [aliceRequest], error: .authenticationFailed(status: 0xFF))),
        SOCKS5Exchange(
            description: "CONNECT reply with version 4", credentials: nil, input: chooseNone + [0x04, 0x00, 0x00, 0x01, 1, 2, 3, 4, 0, 80],
            expected: SOCKS5Outcome(sent: [connectExample], error: .notSOCKS5(version: 0x04))),
        SOCKS5Exchange(
            description: "connection refused", credentials: nil, input: chooseNone + [0x05, 0x05, 0x00, 0x01, 0, 0, 0, 0, 0, 0],
            expected: SOCKS5Outcome(sent: [connectExample], error: .connectFailed(.connectionRefused))),
        SOCKS5Exchange(
            description: "host unreachable, reply cut after REP", credentials: alice, input: chooseUserPassword + authenticated + [0x05, 0x04],
            expected: SOCKS5Outcome(sent: [aliceRequest, connectExample], error: .connectFailed(.hostUnreachable))),
        SOCKS5Exchange(
            description: "an unassigned reply code", credentials: nil, input: chooseNone + [0x05, 0x09, 0x00, 0x01],
            expected: SOCKS5Outcome(sent: [connectExample], error: .connectFailed(SOCKS5ReplyCode(rawValue: 0x09)))),
        SOCKS5Exchange(
            description: "address type 2", credentials: nil, input: chooseNone + [0x05, 0x00, 0x00, 0x02, 0, 0, 0, 0, 0, 0],
            expected: SOCKS5Outcome(sent: [connectExample], error: .malformedReply("unknown address type 0x02 in the CONNECT reply"))),
        SOCKS5Exchange(
            description: "address type 0", credentials: nil, input: chooseNone + [0x05, 0x00, 0x00, 0x00],
            expected: SOCKS5Outcome(sent: [connectExample], error: .malformedReply("unknown address type 0x00 in the CONNECT reply"))),
    ]
}

// MARK: - Tests

@Suite("SOCKS5 handshake")
struct SOCKS5HandshakeTests {
    @Test func greetingOffersUserPasswordOnlyWithCredentials() throws {
        #expect(try makeHandshake(nil).greeting() == [0x05, 0x01, 0x00])
        #expect(try makeHandshake(alice).greeting() == [0x05, 0x02, 0x00, 0x02])
    }

    @Test("an exchange gives the same outcome however it is sliced", arguments: SOCKS5Exchange.all)
    func exchange(_ exchange: SOCKS5Exchange) throws {
        let handshake = try makeHandshake(exchange.credentials)
        let count = exchange.input.count
        #expect(drive(handshake, exchange.input, cuts: []) == exchange.expected, "fed whole")
        #expect(drive(handshake, exchange.input, cuts: Array(0..<count)) == exchange.expected, "fed one byte at a time")
        var random = SplitMix64(seed: 0x50C5_0005 &+ UInt64(count))
        for round in 0..<64 {
            let cuts = randomCuts(count, &random)
            #expect(drive(handshake, exchange.input, cuts: cuts) == exchange.expected, "round \(round), cut at \(cuts.sorted())")
        }
    }

    @Test func connectRequestEncodesEveryAddressTypeAndThePort() throws {
        let cases: [(SOCKS5Destination, UInt16, [UInt8])] = [
            (.ipv4([192, 0, 2, 7]), 80, [0x05, 0x01, 0x00, 0x01, 192, 0, 2, 7, 0x00, 0x50]),
            (.ipv6([0x20, 0x01, 0x0D, 0xB8] + [UInt8](repeating: 0, count: 11) + [0x01]), 8443,
             [0x05, 0x01, 0x00, 0x04, 0x20, 0x01, 0x0D, 0xB8] + [UInt8](repeating: 0, count: 11) + [0x01, 0x20, 0xFB]),
            (.domain("a.test"), 65535, [0x05, 0x01, 0x00, 0x03, 6] + Array("a.test".utf8) + [0xFF, 0xFF]),
            (.domain("bücher.test"), 1, [0x05, 0x01, 0x00, 0x03, 12] + Array("bücher.test".utf8) + [0x00, 0x01]),
        ]
        for (destination, port, request) in cases {
            let handshake = try makeHandshake(nil, destination: destination, port: port)
            #expect(drive(handshake, chooseNone, cuts: []) == SOCKS5Outcome(sent: [request]), "\(destination)")
        }
    }

    @Test func authenticationRequestCarriesLengthsAndAllowsAnEmptyPassword() throws {
        let empty = try makeHandshake(ProxyServer.Credentials(user: "bob", password: ""))
        #expect(drive(empty, chooseUserPassword, cuts: []) == SOCKS5Outcome(sent: [[0x01, 0x03] + Array("bob".utf8) + [0x00]]))

        let user = String(repeating: "u", count: 255)
        let password = String(repeating: "p", count: 255)
        let longest = try makeHandshake(ProxyServer.Credentials(user: user, password: password))
        let request: [UInt8] = [0x01, 0xFF] + Array(user.utf8) + [0xFF] + Array(password.utf8)
        #expect(drive(longest, chooseUserPassword, cuts: []) == SOCKS5Outcome(sent: [request]))
    }

    @Test func bytesAfterTheReplyStayUnreadAndEstablishedIsTerminal() throws {
        var handshake = try makeHandshake(nil)
        let input = chooseNone + boundIPv4 + tunnelBytes
        let first = receive(&handshake, input[...])
        #expect(first == .success(SOCKS5Received(step: .send(connectExample), consumed: 2)))
        let second = receive(&handshake, input[2...])
        #expect(second == .success(SOCKS5Received(step: .established, consumed: boundIPv4.count)))
        #expect(handshake.isEstablished)
        let again = receive(&handshake, tunnelBytes[...])
        #expect(again == .success(SOCKS5Received(step: .established, consumed: 0)))
        let empty = receive(&handshake, [])
        #expect(empty == .success(SOCKS5Received(step: .established, consumed: 0)))
    }

    @Test func aCloseMeansARefusalOnlyBeforeTheConnectReply() throws {
        let credentials = ProxyServer.Credentials(user: "bob", password: "pw")
        var anonymous = try makeHandshake(nil)
        #expect(anonymous.closedByProxy == .closedDuringMethodSelection(offeredCredentials: false))
        var named = try makeHandshake(credentials)
        #expect(named.closedByProxy == .closedDuringMethodSelection(offeredCredentials: true))
        _ = receive(&named, chooseUserPassword[...])
        #expect(named.closedByProxy == .closedDuringAuthentication)
        _ = receive(&anonymous, chooseNone[...])
        #expect(anonymous.closedByProxy == nil)
        _ = receive(&anonymous, boundIPv4[...])
        #expect(anonymous.isEstablished)
        #expect(anonymous.closedByProxy == nil)
    }

    @Test func everyPartialByteIsTakenAndNeedsMore() throws {
        var handshake = try makeHandshake(nil)
        let empty = receive(&handshake, [])
        #expect(empty == .success(SOCKS5Received(step: .needMore, consumed: 0)))
        let input = chooseNone + boundName
        for index in input.indices {
            let received = receive(&handshake, input[index...index])
            let expected: SOCKS5Handshake.Step
            switch index {
            case 1: expected = .send(connectExample)
            case input.count - 1: expected = .established
            default: expected = .needMore
            }
            #expect(received == .success(SOCKS5Received(step: expected, consumed: 1)), "byte \(index)")
        }
        #expect(handshake.isEstablished)
    }

    @Test func aWrongVersionFailsOnItsFirstByte() throws {
        var handshake = try makeHandshake(nil)
        let received = receive(&handshake, [UInt8(ascii: "H")])
        #expect(received == .failure(.notSOCKS5(version: 0x48)))
    }

    @Test func aRefusalFailsWithoutTheRestOfTheReply() throws {
        var handshake = try makeHandshake(nil)
        _ = receive(&handshake, chooseNone[...])
        let received = receive(&handshake, [0x05, 0x02])
        #expect(received == .failure(.connectFailed(.notAllowedByRuleset)))
    }

    @Test func anErrorIsRethrownByEveryLaterCall() throws {
        var handshake = try makeHandshake(alice)
        let selection = receive(&handshake, chooseUserPassword[...])
        #expect(selection == .success(SOCKS5Received(step: .send(aliceRequest), consumed: 2)))
        let rejection = receive(&handshake, [0x01, 0x02])
        #expect(rejection == .failure(.authenticationFailed(status: 0x02)))
        let empty = receive(&handshake, [])
        #expect(empty == .failure(.authenticationFailed(status: 0x02)))
        let success = receive(&handshake, boundIPv4[...])
        #expect(success == .failure(.authenticationFailed(status: 0x02)))
        #expect(!handshake.isEstablished)
    }

    @Test func destinationsAreValidated() throws {
        #expect(throws: Never.self) { _ = try makeHandshake(nil, destination: .domain(String(repeating: "a", count: 255))) }
        #expect(throws: SOCKS5Error.invalidDestination("the host name is 256 bytes long, more than SOCKS5's 255")) {
            _ = try makeHandshake(nil, destination: .domain(String(repeating: "a", count: 256)))
        }
        // 128 two-byte characters: 256 bytes of UTF-8.
        #expect(throws: SOCKS5Error.invalidDestination("the host name is 256 bytes long, more than SOCKS5's 255")) {
            _ = try makeHandshake(nil, destination: .domain(String(repeating: "é", count: 128)))
        }
        #expect(throws: SOCKS5Error.invalidDestination("the host name is empty")) {
            _ = try makeHandshake(nil, destination: .domain(""))
        }
        #expect(throws: SOCKS5Error.invalidDestination("an IPv4 address is 4 bytes, not 3")) {
            _ = try makeHandshake(nil, destination: .ipv4([127, 0, 1]))
        }
        #expect(throws: SOCKS5Error.invalidDestination("an IPv6 address is 16 bytes, not 4")) {
            _ = try makeHandshake(nil, destination: .ipv6([127, 0, 0, 1]))
        }
    }

    @Test func credentialsAreValidated() throws {
        #expect(throws: SOCKS5Error.invalidCredentials("the user name is empty")) {
            _ = try makeHandshake(ProxyServer.Credentials(user: "", password: "x"))
        }
        #expect(throws: SOCKS5Error.invalidCredentials("the user name is longer than 255 bytes")) {
            _ = try makeHandshake(ProxyServer.Credentials(user: String(repeating: "u", count: 256), password: "x"))
        }
        #expect(throws: SOCKS5Error.invalidCredentials("the password is longer than 255 bytes")) {
            _ = try makeHandshake(ProxyServer.Credentials(user: "u", password: String(repeating: "p", count: 256)))
        }
        // Without credentials nothing about them is checked.
        #expect(throws: Never.self) { _ = try makeHandshake(nil) }
    }

    @Test func replyCodesAndErrorsReadAsSentences() {
        let codes: [(SOCKS5ReplyCode, String)] = [
            (.generalFailure, "general SOCKS server failure"),
            (.notAllowedByRuleset, "connection not allowed by ruleset"),
            (.networkUnreachable, "network unreachable"),
            (.hostUnreachable, "host unreachable"),
            (.connectionRefused, "connection refused"),
            (.ttlExpired, "TTL expired"),
            (.commandNotSupported, "command not supported"),
            (.addressTypeNotSupported, "address type not supported"),
            (SOCKS5ReplyCode(rawValue: 0x09), "reply code 0x09"),
            (SOCKS5ReplyCode(rawValue: 0xAB), "reply code 0xAB"),
        ]
        for (code, text) in codes {
            #expect(code.description == text)
        }
        #expect((UInt8(1)...8).map { SOCKS5ReplyCode(rawValue: $0) } == codes.prefix(8).map { $0.0 })
        #expect(SOCKS5Error.connectFailed(.connectionRefused).description == "the SOCKS5 proxy could not connect: connection refused")
        #expect(SOCKS5Error.credentialsRequired.description == "the SOCKS5 proxy requires a user name and password: configure them with the proxy")
        #expect(SOCKS5Error.authenticationFailed(status: 1).description == "the SOCKS5 proxy rejected the user name and password (status 0x01)")
        #expect(SOCKS5Error.notSOCKS5(version: 0x48).description.contains("version byte 0x48"))
    }
}
