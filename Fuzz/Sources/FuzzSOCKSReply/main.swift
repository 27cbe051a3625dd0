// SOCKS5 handshakes against arbitrary proxy bytes: the method selection, the RFC 1929 status and
// the CONNECT reply with its bound address. Byte 0 picks the configuration: bit 0 configures a
// user name and password (bit 1 makes the password empty), bits 2-3 the destination (a name,
// IPv4, IPv6, a 255-byte name), bits 4-7 a piece size for slicing (0: none); byte 1 seeds a few
// more cuts. The rest is what the proxy sends, fed whole, in those pieces and one byte at a time.
//
// Whatever the input, only SOCKS5Error comes out (typed throws) and nothing traps; no call uses
// more bytes than it was given and `.needMore` takes all of them; the handshake asks to send only
// its own requests, in order (credentials, then CONNECT); it is established after at most
// 4 + 262 bytes and then reads nothing more; an error is thrown again by every later call; and
// the outcome does not depend on how the input was sliced.
import CourierCore
import CourierTransport

/// The destinations bits 2-3 choose from.
private let destinations: [SOCKS5Destination] = [
    .domain("example.test"),
    .ipv4([127, 0, 0, 1]),
    .ipv6([UInt8](repeating: 0, count: 15) + [1]),
    .domain(String(repeating: "a", count: 255)),
]
/// The credentials bit 1 chooses from, when bit 0 configures any.
private let credentialChoices = [
    ProxyServer.Credentials(user: "alice", password: "s3cret"),
    ProxyServer.Credentials(user: "alice", password: ""),
]
private let port: UInt16 = 443
/// Bytes the proxy sends before the tunnel opens, at most: the method selection (2), the
/// RFC 1929 status (2) and the longest CONNECT reply.
private let longestHandshake = 2 + 2 + SOCKS5Handshake.maxReplyBytes

/// A handshake's configuration and the requests it must send, encoded here by hand from
/// RFC 1928 section 4 and RFC 1929 section 2 rather than by the code under test.
private struct Configuration {
    var destination: SOCKS5Destination
    var credentials: ProxyServer.Credentials?
    var authenticationRequest: [UInt8]?
    var connectRequest: [UInt8]

    init(_ flags: UInt8) {
        destination = destinations[Int(flags >> 2) & 3]
        credentials = flags & 1 != 0 ? credentialChoices[Int(flags >> 1) & 1] : nil
        switch destination {
        case .domain(let name): connectRequest = [5, 1, 0, 3, UInt8(name.utf8.count)] + Array(name.utf8)
        case .ipv4(let address): connectRequest = [5, 1, 0, 1] + address
        case .ipv6(let address): connectRequest = [5, 1, 0, 4] + address
        }
        connectRequest += [UInt8(port >> 8), UInt8(port & 0xFF)]
        if let credentials {
            let user = Array(credentials.user.utf8)
            let password = Array(credentials.password.utf8)
            var request: [UInt8] = [1, UInt8(user.count)]
            request += user
            request.append(UInt8(password.count))
            request += password
            authenticationRequest = request
        }
    }

    /// Whether `sent` is a legal sequence of requests so far.
    func isLegal(_ sent: [[UInt8]]) -> Bool {
        if sent == [connectRequest] { return true }
        guard let authenticationRequest else { return false }
        return sent == [authenticationRequest] || sent == [authenticationRequest, connectRequest]
    }
}

/// What a handshake did with the input, in a form that does not depend on the slicing.
private struct Outcome: Equatable {
    var sent: [[UInt8]] = []
    var establishedAt: Int?
    var error: SOCKS5Error?
}

/// Feeds `input` to a fresh handshake in the pieces `cuts` makes, as a driver would, checking
/// every step; stops at `.established`, at an error or when the input runs out.
private func run(_ configuration: Configuration, _ input: UnsafeRawBufferPointer, cuts: [Int]) -> Outcome {
    var handshake: SOCKS5Handshake
    do throws(SOCKS5Error) {
        handshake = try SOCKS5Handshake(destination: configuration.destination, port: port, credentials: configuration.credentials)
    } catch {
        preconditionFailure("a valid configuration was refused: \(error)")
    }
    var outcome = Outcome()
    var bounds = [0] + cuts.filter { $0 > 0 && $0 < input.count }.sorted() + [input.count]
    bounds = bounds.reduce(into: []) { if $0.last != $1 { $0.append($1) } }
    var position = 0
    for index in 0..<(bounds.count - 1) {
        let end = bounds[index + 1]
        var needsMore = false
        while !needsMore {
            let given = end - position
            let result: (step: SOCKS5Handshake.Step, consumed: Int)
            do throws(SOCKS5Error) {
                result = try handshake.receive(UnsafeRawBufferPointer(rebasing: input[position..<end]))
            } catch {
                _ = error.description
                checkStaysFailed(&handshake, with: error, rest: UnsafeRawBufferPointer(rebasing: input[position...]))
                outcome.error = error
                return outcome
            }
            precondition(result.consumed >= 0 && result.consumed <= given, "used \(result.consumed) of \(given) bytes")
            position += result.consumed
            precondition(position <= longestHandshake, "read \(position) bytes, more than a handshake holds")
            switch result.step {
            case .needMore:
                precondition(position == end, "asked for more with \(end - position) bytes left")
                needsMore = true
            case .send(let bytes):
                outcome.sent.append(bytes)
                precondition(configuration.isLegal(outcome.sent), "sent \(outcome.sent)")
            case .established:
                precondition(handshake.isEstablished, "established but not isEstablished")
                precondition(outcome.sent.last == configuration.connectRequest, "established before sending CONNECT")
                checkReadsNothingMore(&handshake, rest: UnsafeRawBufferPointer(rebasing: input[position...]))
                outcome.establishedAt = position
                return outcome
            }
        }
    }
    precondition(!handshake.isEstablished, "established without saying so")
    return outcome
}

/// A failed handshake throws the same error for any further input, even none.
private func checkStaysFailed(_ handshake: inout SOCKS5Handshake, with original: SOCKS5Error, rest: UnsafeRawBufferPointer) {
    for bytes in [rest, UnsafeRawBufferPointer(rebasing: rest[0..<0])] {
        do throws(SOCKS5Error) {
            let again = try handshake.receive(bytes)
            preconditionFailure("a failed handshake went on to \(again.step)")
        } catch {
            precondition(error == original, "failed with \(original), then with \(error)")
        }
    }
}

/// An established handshake takes no byte of the tunnel.
private func checkReadsNothingMore(_ handshake: inout SOCKS5Handshake, rest: UnsafeRawBufferPointer) {
    do throws(SOCKS5Error) {
        let again = try handshake.receive(rest)
        precondition(again.step == .established && again.consumed == 0, "an established handshake went on to \(again)")
    } catch {
        preconditionFailure("an established handshake threw \(error)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSOCKSReply(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let flags = data[0]
    let configuration = Configuration(flags)
    let input = UnsafeRawBufferPointer(start: data + 2, count: size - 2)
    // Cuts past the longest handshake would never be reached.
    let span = Swift.min(input.count, longestHandshake + 1)

    var cuts: [Int] = []
    let piece = Int(flags >> 4)
    if piece > 0 { cuts += Array(stride(from: piece, to: span, by: piece)) }
    // A small linear congruential generator (Numerical Recipes' constants) seeded by byte 1.
    var state = UInt32(data[1]) &* 2_654_435_761 | 1
    for _ in 0..<4 where span > 1 {
        state = state &* 1_664_525 &+ 1_013_904_223
        cuts.append(1 + Int(state >> 8) % (span - 1))
    }

    let whole = run(configuration, input, cuts: [])
    let sliced = run(configuration, input, cuts: cuts)
    precondition(sliced == whole, "sliced at \(cuts.sorted()): \(sliced), whole: \(whole)")
    let bytewise = run(configuration, input, cuts: Array(stride(from: 1, to: span, by: 1)))
    precondition(bytewise == whole, "one byte at a time: \(bytewise), whole: \(whole)")
    return 0
}
