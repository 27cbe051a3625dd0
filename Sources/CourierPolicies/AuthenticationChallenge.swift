/// One challenge of a `WWW-Authenticate` or `Proxy-Authenticate` field (RFC 9110 §11.6.1): a
/// scheme, and either a token68 or a list of parameters.
public struct AuthenticationChallenge: Sendable, Equatable {
    /// One `name=value` parameter; the name lowercased (names are case-insensitive), the value
    /// with its quotes and escapes removed.
    public struct Parameter: Sendable, Equatable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The scheme as the server wrote it; compare with ``normalizedScheme``.
    public var scheme: String
    /// The token68 form (`Negotiate abc==`), when the challenge has one.
    public var token68: String?
    public var parameters: [Parameter]

    public init(scheme: String, token68: String? = nil, parameters: [Parameter] = []) {
        self.scheme = scheme
        self.token68 = token68
        self.parameters = parameters
    }

    /// The scheme lowercased (schemes are case-insensitive).
    public var normalizedScheme: String { scheme.lowercased() }

    /// The value of a parameter, by name in any case.
    public subscript(parameter name: String) -> String? {
        let lowered = name.lowercased()
        return parameters.first { $0.name == lowered }?.value
    }
}

/// Why a challenge field could not be read.
public struct AuthenticationChallengeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The byte offset in the field value where reading stopped.
    public var offset: Int
    public var reason: String

    public var description: String { "malformed challenge at byte \(offset): \(reason)" }
}

/// Reads challenge fields strictly, by the grammar of RFC 9110 §11.6.1:
///
/// ```
/// challenge   = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
/// auth-param  = token BWS "=" BWS ( token / quoted-string )
/// token68     = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
/// ```
///
/// A field may hold several challenges, and its commas separate both challenges and the
/// parameters of one; a name followed by `=` continues the current challenge, anything else
/// starts the next. A field that breaks the grammar anywhere is refused whole (its other
/// challenges cannot be trusted to mean what they seem to), as is a parameter named twice in
/// one challenge (RFC 9110 forbids it, and a second `realm` or `algorithm` is an ambiguity
/// that a proxy and a server could read differently).
public enum AuthenticationChallengeParser {
    /// Most challenges read from one field; a longer list is refused as malformed.
    public static let maximumChallenges = 32
    /// Most parameters in one challenge.
    public static let maximumParameters = 64

    /// The challenges of one field value, in order.
    public static func parse(_ value: String) throws(AuthenticationChallengeError) -> [AuthenticationChallenge] {
        var reader = Reader(bytes: Array(value.utf8))
        return try reader.challenges()
    }

    /// The challenges of several field values (the field repeated), in order; a malformed
    /// value is skipped and counted.
    public static func parse(fields values: [String]) -> (challenges: [AuthenticationChallenge], malformed: [AuthenticationChallengeError]) {
        var challenges: [AuthenticationChallenge] = []
        var malformed: [AuthenticationChallengeError] = []
        for value in values {
            do throws(AuthenticationChallengeError) {
                challenges += try parse(value)
            } catch {
                malformed.append(error)
            }
        }
        return (challenges, malformed)
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        init(bytes: [UInt8]) {
            self.bytes = bytes
        }

        var atEnd: Bool { index >= bytes.count }
        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        func fail(_ reason: String) -> AuthenticationChallengeError {
            AuthenticationChallengeError(offset: index, reason: reason)
        }

        mutating func challenges() throws(AuthenticationChallengeError) -> [AuthenticationChallenge] {
            var result: [AuthenticationChallenge] = []
            skipListSeparators()
            while !atEnd {
                guard result.count < AuthenticationChallengeParser.maximumChallenges else { throw fail("more than \(AuthenticationChallengeParser.maximumChallenges) challenges") }
                result.append(try challenge())
                skipListSeparators()
            }
            guard !result.isEmpty else { throw fail("no challenge") }
            return result
        }

        /// Skips optional whitespace and empty list elements (`, ,`).
        mutating func skipListSeparators() {
            while let byte = current, byte == UInt8(ascii: ",") || Self.isWhitespace(byte) { index += 1 }
        }

        mutating func skipWhitespace() {
            while let byte = current, Self.isWhitespace(byte) { index += 1 }
        }

        mutating func challenge() throws(AuthenticationChallengeError) -> AuthenticationChallenge {
            guard let scheme = token() else { throw fail("expected an authentication scheme") }
            var challenge = AuthenticationChallenge(scheme: scheme)
            // The scheme ends the challenge at the end or a comma; otherwise a space must follow.
            if atEnd || current == UInt8(ascii: ",") { return challenge }
            guard current == UInt8(ascii: " ") else { throw fail("expected a space after the scheme") }
            // 1*SP: spaces only, as the grammar says.
            while current == UInt8(ascii: " ") { index += 1 }
            if atEnd || current == UInt8(ascii: ",") { return challenge }
            if let token68 = token68() {
                challenge.token68 = token68
                return challenge
            }
            try parameters(into: &challenge)
            return challenge
        }

        /// A token68 that stands alone: followed by the end or a comma. Otherwise nothing is
        /// consumed (it was the start of a parameter).
        mutating func token68() -> String? {
            let start = index
            var end = index
            while end < bytes.count, Self.isToken68(bytes[end]) { end += 1 }
            guard end > start else { return nil }
            while end < bytes.count, bytes[end] == UInt8(ascii: "=") { end += 1 }
            var after = end
            while after < bytes.count, Self.isWhitespace(bytes[after]) { after += 1 }
            guard after == bytes.count || bytes[after] == UInt8(ascii: ",") else { return nil }
            index = after
            return String(decoding: bytes[start..<end], as: UTF8.self)
        }

        mutating func parameters(into challenge: inout AuthenticationChallenge) throws(AuthenticationChallengeError) {
            while true {
                guard let name = token() else { throw fail("expected a parameter name") }
                skipWhitespace()
                guard current == UInt8(ascii: "=") else { throw fail("expected '=' after \(name)") }
                index += 1
                skipWhitespace()
                let value: String
                if current == UInt8(ascii: "\"") {
                    value = try quotedString()
                } else if let token = token() {
                    value = token
                } else {
                    throw fail("expected a token or a quoted string as the value of \(name)")
                }
                let lowered = name.lowercased()
                guard !challenge.parameters.contains(where: { $0.name == lowered }) else { throw fail("the parameter \(lowered) appears twice") }
                guard challenge.parameters.count < AuthenticationChallengeParser.maximumParameters else { throw fail("too many parameters") }
                challenge.parameters.append(.init(name: lowered, value: value))
                skipWhitespace()
                if atEnd { return }
                guard current == UInt8(ascii: ",") else { throw fail("expected ',' after the value of \(name)") }
                // After the commas: `name =` continues this challenge; anything else is the next.
                let beforeSeparators = index
                skipListSeparators()
                if atEnd || !startsParameter() {
                    if atEnd { return }
                    index = beforeSeparators
                    return
                }
            }
        }

        /// True when a token followed by optional whitespace and `=` starts at the index (and
        /// is not a token68 with padding standing alone).
        func startsParameter() -> Bool {
            var probe = index
            while probe < bytes.count, Self.isTokenCharacter(bytes[probe]) { probe += 1 }
            guard probe > index else { return false }
            while probe < bytes.count, Self.isWhitespace(bytes[probe]) { probe += 1 }
            return probe < bytes.count && bytes[probe] == UInt8(ascii: "=")
        }

        mutating func token() -> String? {
            let start = index
            while let byte = current, Self.isTokenCharacter(byte) { index += 1 }
            guard index > start else { return nil }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        mutating func quotedString() throws(AuthenticationChallengeError) -> String {
            index += 1  // the opening quote
            var value: [UInt8] = []
            while true {
                guard let byte = current else { throw fail("unterminated quoted string") }
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    // Quoted strings carry UTF-8 in practice (realms with accents); bytes that
                    // are not UTF-8 are replaced rather than refused.
                    return String(decoding: value, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard let escaped = current, escaped == 0x09 || (escaped >= 0x20 && escaped != 0x7F) else {
                        throw fail("a backslash must escape a visible character")
                    }
                    value.append(escaped)
                    index += 1
                default:
                    guard byte == 0x09 || (byte >= 0x20 && byte != 0x7F) else { throw fail("a control character in a quoted string") }
                    value.append(byte)
                }
            }
        }

        static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

        static func isTokenCharacter(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }

        static func isToken68(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return "-._~+/".utf8.contains(byte)
            }
        }
    }
}
