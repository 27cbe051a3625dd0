import CourierCore
import CourierHTTP1
import Testing

/// How a transcript's input is handed to the parser.
enum Feeding: String, CaseIterable, Sendable {
    /// All input in one call.
    case whole
    /// One byte per call.
    case bytewise
    /// All input followed by bytes of the next message, which must stay unread.
    case withExtraBytes
}

/// Runs the parser over a transcript's input and records the events it reports.
struct TranscriptRunner {
    static let extraBytes: [UInt8] = Array("HTTP/1.1 999 NEXT MESSAGE\r\n".utf8)

    let transcript: Transcript

    /// The recorded events (body spans merged) and how many input bytes were consumed.
    func run(_ feeding: Feeding) -> (events: [Transcript.Event], consumed: Int, reuse: HTTP1ConnectionReuse) {
        var parser = HTTP1ResponseParser(options: transcript.options)
        parser.expectResponse(to: transcript.method)
        let expectedEnds = transcript.events.filter { if case .end = $0 { return true } else { return false } }.count
        var ends = 0
        var events: [Transcript.Event] = []
        var consumed = 0
        var stopped = false

        var pendingBody: [UInt8]?
        func record(_ event: Transcript.Event) {
            if case .body(let bytes) = event {
                if pendingBody == nil { pendingBody = [] }
                pendingBody!.append(contentsOf: bytes)
                return
            }
            if let body = pendingBody {
                events.append(.body(body))
                pendingBody = nil
            }
            events.append(event)
        }

        let input = feeding == .withExtraBytes ? transcript.input + Self.extraBytes : transcript.input
        let chunks: [ArraySlice<UInt8>] = feeding == .bytewise
            ? input.indices.map { input[$0...$0] }
            : [input[...]]

        chunkLoop: for chunk in chunks {
            let chunkBytes = Array(chunk)
            var offset = 0
            while true {
                let step: HTTP1ParseStep
                do {
                    step = try chunkBytes.withUnsafeBytes { try parser.next(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
                } catch let error as HTTP1ResponseError {
                    record(.error(caseName(error)))
                    stopped = true
                    break chunkLoop
                } catch {
                    record(.error("unexpected \(error)"))
                    stopped = true
                    break chunkLoop
                }
                if let event = step.event {
                    switch event {
                    case .head(let head):
                        record(.head(statusLine(head), head.fields.fields))
                    case .informational:
                        // Transcripts describe the final heads; interim ones have their own
                        // tests (InformationalResponseTests).
                        break
                    case .body(let range):
                        record(.body(Array(chunkBytes[(offset + range.lowerBound)..<(offset + range.upperBound)])))
                    case .end(let trailers):
                        record(.end(trailers?.fields ?? []))
                        ends += 1
                        if ends < expectedEnds { parser.expectResponse(to: transcript.method) }
                    }
                }
                offset += step.consumed
                if step.event == nil { break }
            }
            consumed += offset
            if offset < chunkBytes.count { break }
        }
        if transcript.closesAfterInput && !stopped {
            do {
                if let event = try parser.finish(), case .end(let trailers) = event { record(.end(trailers?.fields ?? [])) }
            } catch {
                record(.error(caseName(error)))
            }
        }
        if let body = pendingBody { events.append(.body(body)) }
        return (events, consumed, parser.connectionReuse)
    }

    /// The enum case name of an error ("invalidChunkSize"), not its description.
    private func caseName(_ error: any Error) -> String {
        (error as? HTTP1ResponseError)?.rawValue ?? "unexpected \(error)"
    }

    private func statusLine(_ head: HTTPResponseHead) -> String {
        let prefix = "\(head.version) \(head.status)"
        return head.reason.isEmpty ? prefix : "\(prefix) \(head.reason)"
    }
}

@Suite("HTTP/1 response transcripts")
struct TranscriptTests {
    @Test("transcript", arguments: Transcript.all)
    func transcript(_ transcript: Transcript) {
        let runner = TranscriptRunner(transcript: transcript)
        for feeding in Feeding.allCases {
            if feeding == .withExtraBytes && !transcript.endsAtBoundary { continue }
            let result = runner.run(feeding)
            #expect(result.events == transcript.events, "fed \(feeding.rawValue)")
            if let reuse = transcript.reuse {
                #expect(result.reuse == reuse, "fed \(feeding.rawValue)")
            }
            if feeding == .withExtraBytes {
                #expect(result.consumed == transcript.input.count, "bytes after the message were consumed")
            }
        }
    }

    @Test("the transcript suite is large enough to cover RFC 9112 framing")
    func transcriptCount() {
        #expect(Transcript.all.count >= 150)
    }
}
