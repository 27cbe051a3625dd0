import CourierCore
import Testing

/// The marks that let a connection reuse what it wrote for a set of fields: identity (the
/// same storage) and the validation mark of ``HTTPFields/validated()``; and the Content-Length
/// a parser leaves on a response head.
@Suite("Shared fields and validated heads")
struct SharedFieldsTests {
    @Test("a copy is identical to its original; a changed copy, or equal fields made apart, are not")
    func identity() throws {
        let fields = try HTTPFields([("Accept", "*/*"), ("User-Agent", "t/1")]).validated()
        let copy = fields
        #expect(copy.isIdentical(to: fields))

        var added = fields
        added.append(name: "Cookie", value: "a=1")
        #expect(!added.isIdentical(to: fields))
        #expect(copy.isIdentical(to: fields), "changing a copy leaves the original's storage alone")
        #expect(fields.first("Cookie") == nil)

        var removed = fields
        removed.removeAll(named: "Accept")
        #expect(!removed.isIdentical(to: fields))

        let apart = try HTTPFields([("Accept", "*/*"), ("User-Agent", "t/1")]).validated()
        #expect(apart == fields)
        #expect(!apart.isIdentical(to: fields))
        #expect(HTTPFields().isIdentical(to: HTTPFields()))
    }

    @Test("fields are marked shared by validated() and lose the mark when a field is added")
    func sharedMark() throws {
        let plain = HTTPFields([("A", "1")])
        #expect(!plain.isSharedValidated)
        var shared = try plain.validated()
        #expect(shared.isSharedValidated)
        shared.append(name: "B", value: "2")
        #expect(!shared.isSharedValidated)
        #expect(throws: HTTPFieldError.self) { try HTTPFields([("Bad Name", "1")]).validated() }
    }

    @Test("a head's validated Content-Length goes when its fields change, and is no part of its equality")
    func validatedContentLength() {
        let fields = HTTPFields([("Content-Length", "5")])
        var head = HTTPResponseHead(version: .http1_1, status: 200, fields: fields)
        #expect(head.validatedContentLength == nil)
        head.validatedContentLength = 5
        #expect(head.validatedContentLength == 5)
        #expect(head == HTTPResponseHead(version: .http1_1, status: 200, fields: fields))

        head.fields.append(name: "X-After", value: "1")
        #expect(head.validatedContentLength == nil, "a field added in place")
        head.validatedContentLength = 5
        head.fields = HTTPFields([("Content-Length", "7")])
        #expect(head.validatedContentLength == nil, "the fields replaced")
        head.validatedContentLength = 7
        head.status = 206
        #expect(head.validatedContentLength == 7, "the status is not the fields")
        #expect(head != HTTPResponseHead(version: .http1_1, status: 200, fields: HTTPFields([("Content-Length", "7")])))
    }
}

@Suite("Proxy servers as values")
struct ProxyServerValueTests {
    @Test("a copy keeps its parts when the original changes; each setter changes one part")
    func copiesKeepTheirParts() {
        var proxy = ProxyServer(kind: .http, host: "Proxy.Example", port: 3128)
        #expect(proxy.host == "proxy.example", "the initializer lowers the host")
        let copy = proxy
        proxy.credentials = ProxyServer.Credentials(user: "u", password: "p")
        #expect(copy.credentials == nil)
        #expect(proxy.credentials == ProxyServer.Credentials(user: "u", password: "p"))
        proxy.port = 8080
        proxy.kind = .socks5(.locally)
        proxy.host = "other.example"
        #expect(copy.kind == .http && copy.host == "proxy.example" && copy.port == 3128)
        #expect(proxy.kind == .socks5(.locally) && proxy.host == "other.example" && proxy.port == 8080)
        #expect(proxy.credentials == ProxyServer.Credentials(user: "u", password: "p"), "other parts stay")
        #expect(proxy != copy)
        #expect(proxy.description == "socks5://other.example:8080")
    }

    @Test("equal proxies made apart are equal and hash alike; one differing part makes them differ")
    func equalityAndHashing() {
        let base = ProxyServer(kind: .socks5(.byProxy), host: "p.example", port: 1080, credentials: .init(user: "u", password: "p"))
        let same = ProxyServer(kind: .socks5(.byProxy), host: "P.EXAMPLE", port: 1080, credentials: .init(user: "u", password: "p"))
        #expect(base == same)
        #expect(base.hashValue == same.hashValue)
        #expect(Set([base, same]).count == 1)
        let others = [
            ProxyServer(kind: .socks5(.locally), host: "p.example", port: 1080, credentials: .init(user: "u", password: "p")),
            ProxyServer(kind: .socks5(.byProxy), host: "q.example", port: 1080, credentials: .init(user: "u", password: "p")),
            ProxyServer(kind: .socks5(.byProxy), host: "p.example", port: 1081, credentials: .init(user: "u", password: "p")),
            ProxyServer(kind: .socks5(.byProxy), host: "p.example", port: 1080, credentials: .init(user: "u", password: "q")),
            ProxyServer(kind: .socks5(.byProxy), host: "p.example", port: 1080),
        ]
        for other in others { #expect(other != base, "\(other)") }
        #expect(Set(others + [base]).count == others.count + 1)
        let absent: ProxyServer? = nil
        #expect(absent == nil)
        #expect(Optional(base) != absent)
    }
}
