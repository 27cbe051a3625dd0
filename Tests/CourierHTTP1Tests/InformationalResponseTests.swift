import CourierCore
import CourierHTTP1
import Testing

/// Interim 1xx responses are reported as `.informational` events, each with its fields, before
/// the final head; 101 is a final head.
@Suite("Informational responses")
struct InformationalResponseTests {
    private func events(_ text: String) throws -> [HTTP1ResponseEvent] {
        var parser = HTTP1ResponseParser()
        parser.expectResponse(to: .get)
        let bytes = Array(text.utf8)
        var offset = 0
        var events: [HTTP1ResponseEvent] = []
        while offset <= bytes.count {
            let step = try bytes.withUnsafeBytes { try parser.next(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
            offset += step.consumed
            guard let event = step.event else { break }
            events.append(event)
            if case .end = event { break }
        }
        return events
    }

    @Test("100 and 103 come as interim events, with their fields, then the final response")
    func interimThenFinal() throws {
        let found = try events(
            "HTTP/1.1 100 Continue\r\n\r\n"
                + "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nLink: </b.js>; rel=preload\r\n\r\n"
                + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        )
        #expect(found.count == 5)
        guard found.count == 5, case .informational(let first) = found[0], case .informational(let hints) = found[1],
              case .head(let final) = found[2], case .body(let body) = found[3], case .end = found[4] else {
            Issue.record("unexpected events \(found)")
            return
        }
        #expect(first.status == 100 && first.fields.fields.isEmpty)
        #expect(hints.status == 103)
        #expect(hints.fields.values("Link") == ["</a.css>; rel=preload", "</b.js>; rel=preload"])
        #expect(final.status == 200)
        #expect(body.count == 2)
    }

    @Test("101 is the final head, never an interim one")
    func switchingProtocols() throws {
        let found = try events("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        guard case .head(let head)? = found.first else {
            Issue.record("unexpected events \(found)")
            return
        }
        #expect(head.status == 101)
    }
}
