import CourierCore
import CourierHTTP1

/// What the HTTP/1 parser reported, in a form that does not depend on how its input was
/// split: body bytes are joined between structural events.
public enum ParsedEvent: Equatable {
    case head(status: Int, reason: String, fields: [HTTPFields.Field])
    case informational(status: Int, reason: String, fields: [HTTPFields.Field])
    case body([UInt8])
    case end(trailers: [HTTPFields.Field])
    case error(HTTP1ResponseError)
}

/// Feeds `input` to a fresh parser in the given chunks (indices where to cut), stopping at the
/// first error, at the end of a message, or when input runs out; then tells it the connection
/// closed. Traps when the parser stops making progress: a hang is a finding too.
public func parse(_ input: UnsafeRawBufferPointer, cuts: [Int], method: HTTPMethod, options: HTTP1ParserOptions) -> [ParsedEvent] {
    var parser = HTTP1ResponseParser(options: options)
    parser.expectResponse(to: method)
    var events: [ParsedEvent] = []
    func record(_ event: ParsedEvent) {
        if case .body(let bytes) = event, case .body(let earlier)? = events.last {
            events[events.count - 1] = .body(earlier + bytes)
        } else {
            events.append(event)
        }
    }
    var bounds = [0] + cuts.filter { $0 > 0 && $0 < input.count }.sorted() + [input.count]
    bounds = bounds.reduce(into: []) { if $0.last != $1 { $0.append($1) } }
    outer: for index in 0..<(bounds.count - 1) {
        let chunk = UnsafeRawBufferPointer(rebasing: input[bounds[index]..<bounds[index + 1]])
        var offset = 0
        while true {
            let step: HTTP1ParseStep
            do {
                step = try parser.next(UnsafeRawBufferPointer(rebasing: chunk[offset...]))
            } catch {
                record(.error(error))
                return events
            }
            precondition(step.consumed >= 0 && offset + step.consumed <= chunk.count, "the parser consumed bytes it was not given")
            switch step.event {
            case .head(let head)?:
                record(.head(status: head.status, reason: head.reason, fields: head.fields.fields))
            case .informational(let head)?:
                precondition((100..<200).contains(head.status) && head.status != 101, "an interim event for a final status")
                record(.informational(status: head.status, reason: head.reason, fields: head.fields.fields))
            case .body(let range)?:
                precondition(range.lowerBound >= 0 && range.upperBound <= chunk.count - offset, "a body span outside the input")
                record(.body(Array(UnsafeRawBufferPointer(rebasing: chunk[(offset + range.lowerBound)..<(offset + range.upperBound)]))))
            case .end(let trailers)?:
                record(.end(trailers: trailers?.fields ?? []))
                offset += step.consumed
                break outer
            case nil:
                // No event: every byte must have been taken, unless nothing more is read.
                if step.consumed < chunk.count - offset && !parser.isIdle && parser.connectionReuse != .upgraded {
                    preconditionFailure("the parser stopped making progress")
                }
                offset += step.consumed
                continue outer
            }
            offset += step.consumed
        }
    }
    if case .end? = events.last { return events }
    if case .head? = events.last, parser.connectionReuse == .upgraded { return events }
    do {
        if case .end(let trailers)? = try parser.finish() { record(.end(trailers: trailers?.fields ?? [])) }
    } catch {
        record(.error(error))
    }
    return events
}

/// Reads a small selection from the first bytes of a fuzz input: method and leniencies.
public func configuration(from byte: UInt8) -> (HTTPMethod, HTTP1ParserOptions) {
    let methods: [HTTPMethod] = [.get, .head, .connect, .post]
    var options = HTTP1ParserOptions()
    options.allowsBareLineFeed = byte & 0x04 != 0
    options.allowsObsoleteLineFolding = byte & 0x08 != 0
    if byte & 0x10 != 0 {
        // Small limits reach the limit checks quickly.
        options.maxHeaderSectionBytes = 512
        options.maxHeaderFieldCount = 8
        options.maxChunkExtensionBytes = 16
        options.maxInformationalResponses = 2
    }
    return (methods[Int(byte & 0x03)], options)
}
