@testable import CourierPolicies
import Testing

/// The challenge parser against the grammar of RFC 9110 §11.6.1:
///
/// ```
/// WWW-Authenticate = #challenge
/// challenge        = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
/// auth-scheme      = token
/// auth-param       = token BWS "=" BWS ( token / quoted-string )
/// token68          = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
/// ```
///
/// with the list rule of §5.6.1 (`#element` accepts empty elements and OWS around commas) and
/// quoted-string of §5.6.4 (`qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text`,
/// `quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )`). The expected values are read off the
/// grammar, not off the parser.
@Suite("AuthenticationChallengeParser")
struct AuthenticationChallengeTests {
    /// A challenge with its parameters in order; names as the parser must give them (lowercase).
    static func challenge(_ scheme: String, token68: String? = nil, _ parameters: [(String, String)] = []) -> AuthenticationChallenge {
        AuthenticationChallenge(scheme: scheme, token68: token68, parameters: parameters.map { .init(name: $0.0, value: $0.1) })
    }

    /// One field value and the challenges it holds.
    struct ParseCase: Sendable, CustomStringConvertible {
        var name: String
        var field: String
        var expected: [AuthenticationChallenge]
        var description: String { name }
    }

    static let wellFormed: [ParseCase] = [
        ParseCase(name: "one challenge with parameters", field: #"Digest realm="x", nonce="y", qop="auth""#, expected: [
            challenge("Digest", [("realm", "x"), ("nonce", "y"), ("qop", "auth")]),
        ]),
        ParseCase(name: "several challenges in one field", field: #"Basic realm="a", Digest realm="b", nonce="n""#, expected: [
            challenge("Basic", [("realm", "a")]),
            challenge("Digest", [("realm", "b"), ("nonce", "n")]),
        ]),
        // RFC 9110 §11.6.1's own example: two challenges, the second with three parameters.
        ParseCase(name: "RFC 9110's example", field: #"Basic realm="simple", Newauth realm="apps", type=1, title="Login to \"apps\"""#, expected: [
            challenge("Basic", [("realm", "simple")]),
            challenge("Newauth", [("realm", "apps"), ("type", "1"), ("title", #"Login to "apps""#)]),
        ]),
        ParseCase(name: "RFC 9110's example, other order", field: #"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple""#, expected: [
            challenge("Newauth", [("realm", "apps"), ("type", "1"), ("title", #"Login to "apps""#)]),
            challenge("Basic", [("realm", "simple")]),
        ]),
        ParseCase(name: "token68", field: "Negotiate abc==", expected: [
            challenge("Negotiate", token68: "abc=="),
        ]),
        ParseCase(name: "token68 followed by another challenge", field: #"Negotiate abc==, Basic realm="x""#, expected: [
            challenge("Negotiate", token68: "abc=="),
            challenge("Basic", [("realm", "x")]),
        ]),
        ParseCase(name: "token68 uses its whole alphabet", field: "Bearer aZ09-._~+/==", expected: [
            challenge("Bearer", token68: "aZ09-._~+/=="),
        ]),
        ParseCase(name: "token68 without padding between challenges", field: "Basic realm=a, Negotiate YII, NTLM", expected: [
            challenge("Basic", [("realm", "a")]),
            challenge("Negotiate", token68: "YII"),
            challenge("NTLM"),
        ]),
        // `realm=` is a token followed by "=": a token68 (the grammar's own ambiguity; an
        // auth-param would need a value).
        ParseCase(name: "a name and '=' alone is a token68", field: "Basic realm=", expected: [
            challenge("Basic", token68: "realm="),
        ]),
        ParseCase(name: "scheme alone", field: "Negotiate", expected: [challenge("Negotiate")]),
        ParseCase(name: "schemes alone, separated by a bare comma", field: "Negotiate,NTLM", expected: [challenge("Negotiate"), challenge("NTLM")]),
        ParseCase(name: "scheme alone, then a challenge", field: #"Negotiate, Basic realm="x""#, expected: [
            challenge("Negotiate"),
            challenge("Basic", [("realm", "x")]),
        ]),
        ParseCase(name: "scheme followed by spaces only", field: "Negotiate   ", expected: [challenge("Negotiate")]),
        // After a parameter, a comma and a token not followed by "=" start the next challenge.
        ParseCase(name: "a bare token after a parameter is the next challenge", field: #"Digest realm="a", nonce"#, expected: [
            challenge("Digest", [("realm", "a")]),
            challenge("nonce"),
        ]),
        ParseCase(name: "empty list elements", field: ", Basic realm=x ,", expected: [
            challenge("Basic", [("realm", "x")]),
        ]),
        ParseCase(name: "empty list elements between challenges and parameters", field: #",, Basic realm="a",, , Digest realm="b", , nonce="n",,"#, expected: [
            challenge("Basic", [("realm", "a")]),
            challenge("Digest", [("realm", "b"), ("nonce", "n")]),
        ]),
        ParseCase(name: "HTAB is OWS around commas", field: "Basic realm=a,\tDigest realm=b,\tnonce=n\t,", expected: [
            challenge("Basic", [("realm", "a")]),
            challenge("Digest", [("realm", "b"), ("nonce", "n")]),
        ]),
        ParseCase(name: "no space after a comma", field: #"Basic realm="a",Digest realm="b",nonce="n""#, expected: [
            challenge("Basic", [("realm", "a")]),
            challenge("Digest", [("realm", "b"), ("nonce", "n")]),
        ]),
        ParseCase(name: "several spaces after the scheme", field: "Basic    realm=x", expected: [
            challenge("Basic", [("realm", "x")]),
        ]),
        ParseCase(name: "quoted-pairs: an escaped quote and backslash", field: #"Basic realm="a \"quoted\" \\ back""#, expected: [
            challenge("Basic", [("realm", #"a "quoted" \ back"#)]),
        ]),
        ParseCase(name: "a quoted-pair may escape any visible character", field: #"Basic realm="\a\b\,""#, expected: [
            challenge("Basic", [("realm", "ab,")]),
        ]),
        ParseCase(name: "commas and '=' inside quoted strings", field: #"Digest realm="a, b", nonce="x,y=", qop="auth,auth-int", Basic realm=",""#, expected: [
            challenge("Digest", [("realm", "a, b"), ("nonce", "x,y="), ("qop", "auth,auth-int")]),
            challenge("Basic", [("realm", ",")]),
        ]),
        ParseCase(name: "HTAB and SP inside a quoted string", field: "Basic realm=\" a\tb \"", expected: [
            challenge("Basic", [("realm", " a\tb ")]),
        ]),
        ParseCase(name: "empty quoted string", field: #"Basic realm="""#, expected: [
            challenge("Basic", [("realm", "")]),
        ]),
        ParseCase(name: "parameter names lowercased, scheme and values as written", field: #"BASIC REALM="Mixed Case", Charset=UTF-8"#, expected: [
            challenge("BASIC", [("realm", "Mixed Case"), ("charset", "UTF-8")]),
        ]),
        ParseCase(name: "BWS around '='", field: "Digest realm = \"x\" , nonce= y ,qop =\t\"auth\"", expected: [
            challenge("Digest", [("realm", "x"), ("nonce", "y"), ("qop", "auth")]),
        ]),
        ParseCase(name: "BWS around '=' in a parameter that continues a challenge", field: "Basic a=1, b =2, Newauth c\t= 3", expected: [
            challenge("Basic", [("a", "1"), ("b", "2")]),
            challenge("Newauth", [("c", "3")]),
        ]),
        ParseCase(name: "UTF-8 in a quoted realm (obs-text)", field: "Basic realm=\"Bücher — 書庫\"", expected: [
            challenge("Basic", [("realm", "Bücher — 書庫")]),
        ]),
        ParseCase(name: "token values of every tchar", field: "Digest realm=r, nonce=!#$%&'*+-.^_`|~09aZ, stale=TRUE", expected: [
            challenge("Digest", [("realm", "r"), ("nonce", "!#$%&'*+-.^_`|~09aZ"), ("stale", "TRUE")]),
        ]),
        ParseCase(name: "the same name in two challenges", field: "Basic realm=a, Basic realm=b", expected: [
            challenge("Basic", [("realm", "a")]),
            challenge("Basic", [("realm", "b")]),
        ]),
    ]

    @Test("well-formed fields", arguments: wellFormed)
    func parsesWellFormed(_ row: ParseCase) throws {
        let parsed = try AuthenticationChallengeParser.parse(row.field)
        #expect(parsed == row.expected)
        // parse(fields:) reads the same field the same way.
        let viaFields = AuthenticationChallengeParser.parse(fields: [row.field])
        #expect(viaFields.challenges == row.expected)
        #expect(viaFields.malformed.isEmpty)
    }

    /// Fields that break the grammar somewhere: each is refused whole.
    static let malformed: [(String, String)] = [
        ("unterminated quoted string", #"Basic realm="abc"#),
        ("the closing quote escaped", #"Basic realm="abc\""#),
        ("a backslash at the end", #"Basic realm="abc\"#),
        ("unterminated quote after a good challenge", #"Basic realm="a", Digest realm="b"#),
        ("a control character in a quoted string", "Basic realm=\"a\u{01}b\""),
        ("NUL in a quoted string", "Basic realm=\"a\u{00}b\""),
        ("DEL in a quoted string", "Basic realm=\"a\u{7F}b\""),
        ("LF in a quoted string", "Basic realm=\"a\nb\""),
        ("CR LF in a quoted string", "Basic realm=\"a\r\n b\""),
        ("a quoted-pair escaping a control character", "Basic realm=\"a\\\u{01}b\""),
        ("a quoted-pair escaping DEL", "Basic realm=\"a\\\u{7F}b\""),
        ("a missing '='", #"Basic realm "x""#),
        ("a missing comma between parameters", #"Digest realm="a" nonce="b""#),
        ("a parameter named twice", #"Basic realm="a", realm="b""#),
        ("a parameter named twice, in another case", #"Basic realm="a", REALM="b""#),
        ("a parameter named twice, far apart", #"Digest realm="a", nonce="n", qop="auth", Realm=b"#),
        // `Basic,realm=x`: `Basic` alone, then an element `realm=x`, which is no challenge
        // (a scheme must be followed by SP, the end or a comma).
        ("no space after the scheme, a parameter after the comma", "Basic,realm=x"),
        ("'=' right after the scheme", "Basic=x"),
        ("a quote right after the scheme", #"Basic"x""#),
        ("HTAB instead of SP after the scheme", "Basic\trealm=x"),
        ("an empty value at the end", "Basic realm=x, charset="),
        ("an empty value followed by a parameter", "Digest realm=, nonce=n"),
        ("an empty value followed by BWS and a parameter", "Basic realm= , charset=x"),
        ("a token68 with characters after its padding", "Negotiate abc==def"),
        ("a token68 followed by a parameter", "Negotiate abc==, realm=x"),
        ("a value with a space in it", "Basic realm=a b"),
        ("non-ASCII outside quotes", "Basic realm=café"),
        ("a value that is neither token nor quoted-string", "Basic realm=(x)"),
        ("a quoted scheme", #""Basic" realm=x"#),
        ("a parameter without a name", "Basic realm=x, =y"),
        ("'=' alone", "="),
        ("a separator as a scheme", "Basic realm=x, @"),
    ]

    @Test("malformed fields are refused", arguments: malformed)
    func refusesMalformed(_ name: String, _ field: String) {
        do throws(AuthenticationChallengeError) {
            let parsed = try AuthenticationChallengeParser.parse(field)
            Issue.record("\(name): parsed \(parsed)")
        } catch {
            #expect(error.offset >= 0 && error.offset <= field.utf8.count, "\(name): offset \(error.offset)")
            #expect(error.description.contains("malformed challenge"))
        }
        let viaFields = AuthenticationChallengeParser.parse(fields: [field])
        #expect(viaFields.challenges.isEmpty, "\(name)")
        #expect(viaFields.malformed.count == 1, "\(name)")
    }

    /// A 401 MUST carry at least one challenge (RFC 9110 §11.6.1); a field of empty elements
    /// has none to act on.
    @Test("a field without a challenge is refused", arguments: ["", " ", ",", " , ,\t,"])
    func refusesEmpty(_ field: String) {
        #expect(throws: AuthenticationChallengeError.self) { try AuthenticationChallengeParser.parse(field) }
    }

    @Test("schemes and parameter names compare case-insensitively")
    func caseInsensitive() throws {
        let parsed = try AuthenticationChallengeParser.parse(#"DiGeSt ReAlM="Where", NONCE=abc"#)
        let first = try #require(parsed.first)
        #expect(first.scheme == "DiGeSt")
        #expect(first.normalizedScheme == "digest")
        #expect(first[parameter: "realm"] == "Where")
        #expect(first[parameter: "REALM"] == "Where")
        #expect(first[parameter: "Nonce"] == "abc")
        #expect(first[parameter: "opaque"] == nil)
        #expect(first.parameters.map(\.name) == ["realm", "nonce"])
    }

    @Test("up to maximumChallenges challenges in a field")
    func challengeLimit() throws {
        let limit = AuthenticationChallengeParser.maximumChallenges
        let atLimit = (1...limit).map { "S\($0) p=\($0)" }.joined(separator: ", ")
        let parsed = try AuthenticationChallengeParser.parse(atLimit)
        #expect(parsed.count == limit)
        #expect(parsed.last == Self.challenge("S\(limit)", [("p", "\(limit)")]))

        let overLimit = (1...(limit + 1)).map { "S\($0)" }.joined(separator: ", ")
        #expect(throws: AuthenticationChallengeError.self) { try AuthenticationChallengeParser.parse(overLimit) }
        // Empty elements are not challenges and do not count.
        let withEmpties = (1...limit).map { "S\($0)" }.joined(separator: ", , ")
        #expect(try AuthenticationChallengeParser.parse(withEmpties).count == limit)
    }

    @Test("up to maximumParameters parameters in a challenge")
    func parameterLimit() throws {
        let limit = AuthenticationChallengeParser.maximumParameters
        let atLimit = "Newauth " + (1...limit).map { "p\($0)=\"v\($0)\"" }.joined(separator: ", ")
        let parsed = try AuthenticationChallengeParser.parse(atLimit)
        #expect(parsed.count == 1)
        #expect(parsed.first?.parameters.count == limit)
        #expect(parsed.first?[parameter: "p\(limit)"] == "v\(limit)")

        let overLimit = "Newauth " + (1...(limit + 1)).map { "p\($0)=v" }.joined(separator: ", ")
        #expect(throws: AuthenticationChallengeError.self) { try AuthenticationChallengeParser.parse(overLimit) }
        // The limit is per challenge: two challenges of `limit` parameters each are fine.
        let twoFull = atLimit + ", " + atLimit
        #expect(try AuthenticationChallengeParser.parse(twoFull).count == 2)
    }

    @Test("parse(fields:) skips a malformed field and keeps the others, in order")
    func severalFields() {
        let result = AuthenticationChallengeParser.parse(fields: [
            #"Basic realm="a""#,
            #"Digest realm="b", nonce="unterminated"#,
            "Negotiate abc==, NTLM",
            #"Basic realm="c", realm="twice""#,
            #"Digest realm="d", nonce="n""#,
        ])
        #expect(result.challenges == [
            Self.challenge("Basic", [("realm", "a")]),
            Self.challenge("Negotiate", token68: "abc=="),
            Self.challenge("NTLM"),
            Self.challenge("Digest", [("realm", "d"), ("nonce", "n")]),
        ])
        #expect(result.malformed.count == 2)
    }

    @Test("parse(fields:) of no fields is empty")
    func noFields() {
        let result = AuthenticationChallengeParser.parse(fields: [])
        #expect(result.challenges.isEmpty)
        #expect(result.malformed.isEmpty)
    }
}
