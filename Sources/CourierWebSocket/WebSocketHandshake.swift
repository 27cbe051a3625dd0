import CCourierOpenSSL
import Foundation

/// The client's half of the opening handshake (RFC 6455 section 4): the fields of the GET that
/// asks for the upgrade, and the check of the server's 101. Sans-IO.
public struct WebSocketHandshake: Sendable {
    /// The nonce, base64: `Sec-WebSocket-Key`.
    public let key: String
    /// The subprotocols offered, in order of preference.
    public let protocols: [String]
    /// Whether permessage-deflate (RFC 7692) is offered.
    public let offersDeflate: Bool

    /// A handshake with a fresh random nonce.
    public init(protocols: [String] = [], offersDeflate: Bool = false) {
        var generator = SystemRandomNumberGenerator()
        let nonce = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        self.init(nonce: nonce, protocols: protocols, offersDeflate: offersDeflate)
    }

    /// A handshake with the given 16-byte nonce (tests use RFC 6455's).
    public init(nonce: [UInt8], protocols: [String] = [], offersDeflate: Bool = false) {
        key = Data(nonce).base64EncodedString()
        self.protocols = protocols
        self.offersDeflate = offersDeflate
    }

    /// The fields the upgrade request carries, besides the caller's own.
    public var requestFields: [(name: String, value: String)] {
        var fields = [
            (name: "Upgrade", value: "websocket"), (name: "Connection", value: "Upgrade"),
            (name: "Sec-WebSocket-Key", value: key), (name: "Sec-WebSocket-Version", value: "13"),
        ]
        if !protocols.isEmpty { fields.append((name: "Sec-WebSocket-Protocol", value: protocols.joined(separator: ", "))) }
        // client_max_window_bits is not offered: the server then leaves this client's window
        // at 15 bits, which zlib's raw deflate can always honour (it cannot write 8).
        if offersDeflate { fields.append((name: "Sec-WebSocket-Extensions", value: "permessage-deflate")) }
        return fields
    }

    /// Whether `name` can be offered as a subprotocol: an RFC 9110 token.
    public static func isValidProtocolName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): return true
            default: return "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }
    }

    /// `Sec-WebSocket-Accept` for `key`: the base64 SHA-1 of the key followed by the GUID of RFC
    /// 6455 section 1.3.
    public static func accept(forKey key: String) -> String {
        let input = Array((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)
        var digest = [UInt8](repeating: 0, count: 20)
        var length: UInt32 = 0
        _ = input.withUnsafeBytes { bytes in EVP_Digest(bytes.baseAddress, bytes.count, &digest, &length, EVP_sha1(), nil) }
        return Data(digest.prefix(Int(length))).base64EncodedString()
    }

    /// What the server agreed to.
    public struct Agreement: Equatable, Sendable {
        /// The subprotocol chosen, one of those offered; nil when the server chose none.
        public var subprotocol: String?
        /// permessage-deflate's parameters, when the server took it.
        public var deflate: DeflateParameters?
    }

    /// permessage-deflate's negotiated parameters (RFC 7692 section 7.1).
    public struct DeflateParameters: Equatable, Sendable {
        public var serverNoContextTakeover = false
        public var clientNoContextTakeover = false
        /// The window the server compresses with (8–15); 15 when not said.
        public var serverMaxWindowBits = 15
        /// The window this client must compress with (8–15); 15 when not said.
        public var clientMaxWindowBits = 15

        public init(serverNoContextTakeover: Bool = false, clientNoContextTakeover: Bool = false, serverMaxWindowBits: Int = 15, clientMaxWindowBits: Int = 15) {
            self.serverNoContextTakeover = serverNoContextTakeover
            self.clientNoContextTakeover = clientNoContextTakeover
            self.serverMaxWindowBits = serverMaxWindowBits
            self.clientMaxWindowBits = clientMaxWindowBits
        }
    }

    /// Checks the server's answer: a 101 with `Upgrade: websocket`, an upgrade `Connection`, the
    /// right `Sec-WebSocket-Accept`, and nothing agreed that was not offered. `values` gives a
    /// field's values by name, each comma-separated element on its own (case-insensitive name).
    public func check(status: Int, values: (String) -> [String]) throws(WebSocketHandshakeError) -> Agreement {
        guard status == 101 else { throw .notSwitching(status: status) }
        guard values("Upgrade").contains(where: { $0.lowercased() == "websocket" }) else { throw .missingUpgrade }
        guard values("Connection").contains(where: { $0.lowercased() == "upgrade" }) else { throw .missingConnectionUpgrade }
        guard values("Sec-WebSocket-Accept") == [Self.accept(forKey: key)] else { throw .wrongAccept }
        var agreement = Agreement()
        let chosen = values("Sec-WebSocket-Protocol")
        if let first = chosen.first {
            guard chosen.count == 1, protocols.contains(first) else { throw .unofferedProtocol(chosen.joined(separator: ", ")) }
            agreement.subprotocol = first
        }
        for extensionValue in values("Sec-WebSocket-Extensions") {
            let parts = extensionValue.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let name = parts.first, name.lowercased() == "permessage-deflate", offersDeflate, agreement.deflate == nil else {
                throw .unofferedExtension(extensionValue)
            }
            agreement.deflate = try Self.deflateParameters(parts.dropFirst(), whole: extensionValue)
        }
        return agreement
    }

    private static func deflateParameters(_ parts: ArraySlice<String>, whole: String) throws(WebSocketHandshakeError) -> DeflateParameters {
        var parameters = DeflateParameters()
        var seen: Set<String> = []
        for part in parts {
            let pieces = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            let name = pieces[0].lowercased()
            // A parameter twice, or one this client cannot honour, refuses the extension.
            guard seen.insert(name).inserted else { throw .unofferedExtension(whole) }
            let value = pieces.count > 1 ? pieces[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"")) : nil
            switch name {
            case "server_no_context_takeover" where value == nil: parameters.serverNoContextTakeover = true
            case "client_no_context_takeover" where value == nil: parameters.clientNoContextTakeover = true
            case "server_max_window_bits":
                guard let bits = value.flatMap(Int.init), (8...15).contains(bits) else { throw .unofferedExtension(whole) }
                parameters.serverMaxWindowBits = bits
            case "client_max_window_bits":
                guard let bits = value.flatMap(Int.init), (8...15).contains(bits) else { throw .unofferedExtension(whole) }
                parameters.clientMaxWindowBits = bits
            default:
                throw .unofferedExtension(whole)
            }
        }
        return parameters
    }
}

/// Why the server's answer to an upgrade request does not open a WebSocket.
public enum WebSocketHandshakeError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Any status but 101: the server did not switch.
    case notSwitching(status: Int)
    case missingUpgrade
    case missingConnectionUpgrade
    /// `Sec-WebSocket-Accept` is missing or does not match the key.
    case wrongAccept
    /// A subprotocol the client did not offer, or more than one.
    case unofferedProtocol(String)
    /// An extension (or extension parameter) the client did not offer.
    case unofferedExtension(String)

    public var description: String {
        switch self {
        case .notSwitching(let status): return "the server answered \(status), not 101 Switching Protocols"
        case .missingUpgrade: return "the 101 has no Upgrade: websocket"
        case .missingConnectionUpgrade: return "the 101 has no Connection: Upgrade"
        case .wrongAccept: return "Sec-WebSocket-Accept does not match the key sent"
        case .unofferedProtocol(let value): return "the server chose a subprotocol that was not offered: \(value)"
        case .unofferedExtension(let value): return "the server agreed to an extension that was not offered: \(value)"
        }
    }
}
