// Authentication challenges on arbitrary bytes: each line of the input is one
// WWW-Authenticate field value. Whatever the input, reading it throws only the parser's error,
// and what it reads keeps the grammar's shape (a scheme, a token68 or parameters with unique
// lowercase names, within the limits). Every Digest offer Courier accepts is answered with a
// fixed credential and request, and the Authorization value produced must read back with the
// same parser (the credentials syntax is the challenge syntax, RFC 9110 §11.4), echoing the
// challenge's realm, nonce and opaque; a remembered credential answers preemptively the same way.
import CourierPolicies
import Foundation

private let requestURL = URL(string: "http://example.test:8080/dir/index.html?q=1")!
private let users = ["Mufasa", "Jäsøn Doe"]
private let password = "Circle of Life"

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAuthChallenge(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let fields = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)

    var read: [AuthenticationChallenge] = []
    var refused = 0
    for field in fields {
        do throws(AuthenticationChallengeError) {
            let challenges = try AuthenticationChallengeParser.parse(field)
            checkShape(challenges)
            read += challenges
        } catch {
            precondition(error.offset >= 0 && error.offset <= field.utf8.count, "an error offset outside the field: \(error)")
            refused += 1
        }
    }
    let together = AuthenticationChallengeParser.parse(fields: fields)
    precondition(together.challenges == read && together.malformed.count == refused, "parse(fields:) disagrees with parse(_:)")

    let (offers, malformed) = AuthenticationEngine.offers(inFields: fields)
    precondition(malformed.count == refused, "offers(inFields:) refused other fields")
    precondition(zip(offers, offers.dropFirst()).allSatisfy { $0.strength >= $1.strength }, "offers out of order")

    for (index, offer) in offers.enumerated() {
        let user = users[index % users.count]
        if case .digest(let challenge) = offer {
            answer(challenge, user: user, body: Array("hello".utf8))
            answer(challenge, user: user, body: nil)
        } else {
            do throws(AuthenticationCredentialError) {
                _ = try HTTPAuthorization.basic(user: user, password: password)
            } catch {
                preconditionFailure("Basic refused a plain credential: \(error)")
            }
        }
        remember(offer, user: user)
    }
    return 0
}

/// The parser's output keeps the grammar's shape.
private func checkShape(_ challenges: [AuthenticationChallenge]) {
    precondition(!challenges.isEmpty && challenges.count <= AuthenticationChallengeParser.maximumChallenges, "\(challenges.count) challenges")
    for challenge in challenges {
        precondition(!challenge.scheme.isEmpty, "an empty scheme")
        precondition(challenge.token68 == nil || challenge.parameters.isEmpty, "a token68 and parameters in one challenge")
        precondition(challenge.parameters.count <= AuthenticationChallengeParser.maximumParameters, "too many parameters")
        let names = challenge.parameters.map(\.name)
        precondition(Set(names).count == names.count, "a parameter named twice: \(names)")
        precondition(names.allSatisfy { !$0.isEmpty && $0 == $0.lowercased() }, "a parameter name not lowercased: \(names)")
    }
}

/// Answers a Digest challenge and reads the answer back.
private func answer(_ challenge: DigestChallenge, user: String, body: [UInt8]?) {
    let request = DigestRequest(method: "POST", uri: "/dir/index.html?q=1", body: body, clientNonce: "0a4f113b", nonceCount: 1)
    let value: String
    do throws(AuthenticationCredentialError) {
        value = try HTTPAuthorization.digest(challenge, user: user, password: password, request: request)
    } catch {
        precondition(error == .bodyNotAvailableForIntegrity && body == nil && challenge.protections == [.authInt], "Digest refused: \(error)")
        return
    }
    checkAnswer(value, challenge: challenge, uri: request.uri)
}

/// An Authorization value reads back as one Digest credential that echoes the challenge.
private func checkAnswer(_ value: String, challenge: DigestChallenge, uri: String) {
    let parsed: [AuthenticationChallenge]
    do throws(AuthenticationChallengeError) {
        parsed = try AuthenticationChallengeParser.parse(value)
    } catch {
        preconditionFailure("the Authorization value does not parse (\(error)): \(value)")
    }
    precondition(parsed.count == 1 && parsed[0].scheme == "Digest" && parsed[0].token68 == nil, "not one Digest credential: \(value)")
    let credential = parsed[0]
    precondition(credential[parameter: "realm"] == challenge.realm, "realm not echoed: \(value)")
    precondition(credential[parameter: "nonce"] == challenge.nonce, "nonce not echoed: \(value)")
    precondition(credential[parameter: "opaque"] == challenge.opaque, "opaque not echoed: \(value)")
    precondition(credential[parameter: "uri"] == uri, "uri not echoed: \(value)")
    precondition(credential[parameter: "algorithm"] == challenge.algorithm.rawValue, "algorithm not echoed: \(value)")
    let digestLength = challenge.algorithm.hex("").utf8.count
    precondition(credential[parameter: "response"]?.utf8.count == digestLength, "a response of the wrong length: \(value)")
    precondition((credential[parameter: "username"] == nil) != (credential[parameter: "username*"] == nil), "not exactly one user name: \(value)")
}

/// The scope of an offer on a fixed URL, and a preemptive answer from it.
private func remember(_ offer: AuthenticationOffer, user: String) {
    guard let scope = AuthenticationScope.covering(requestURL, port: 8080, offer: offer, isProxy: false) else { return }
    precondition(scope.scheme == "http" && scope.host == "example.test" && scope.port == 8080 && !scope.isProxy, "a scope on another origin: \(scope)")
    var store = PreemptiveAuthentication()
    store.remember(scope, realm: offer.realm, offer: offer, user: user, password: password, nonceCount: 1)
    let path = scope.pathPrefixes.first ?? "/"
    guard let preemptive = store.authorization(
        scheme: "http", host: "example.test", port: 8080, isProxy: false, path: path,
        method: "GET", uri: path, body: [], clientNonce: "0a4f113b"
    ) else {
        preconditionFailure("a remembered credential does not answer its own scope's path \(path)")
    }
    if case .digest(let challenge) = offer {
        checkAnswer(preemptive.value, challenge: challenge, uri: path)
    } else {
        precondition(preemptive.value.hasPrefix("Basic "), "not a Basic value: \(preemptive.value)")
    }
}
