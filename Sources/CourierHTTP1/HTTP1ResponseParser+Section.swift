import CCourierScan
import CourierCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Header and trailer sections: gathering lines, then checking and indexing them.
extension HTTP1ResponseParser {
    /// The fields of a section, with what framing needs from them noted on the way.
    struct ParsedFields {
        var fields: HTTPFields
        var framing: FramingFields
    }

    /// Where the values of the fields that decide framing and persistence are.
    struct FramingFields {
        var contentLengths = FieldRanges()
        var transferEncodings = FieldRanges()
        var connectionValues = FieldRanges()
    }

    /// Copies bytes into `section` up to and including the empty line that ends it.
    /// Returns the bytes used and whether the section is complete.
    ///
    /// The lines are found in `input` and the bytes are copied once at the end, not line by
    /// line; the limits are checked at each line as if each had been copied.
    mutating func scanSection(
        _ input: UnsafeRawBufferPointer, from start: Int
    ) throws(HTTP1ResponseError) -> (used: Int, done: Bool) {
        let base = input.baseAddress!
        if section.capacity == 0 {
            // A new section: room for a head like the last one at once, rather than a
            // reallocation at every doubling from the first line's size (five for a typical
            // 300-byte head). The section becomes the head's field storage, so it is not reused.
            section.reserveCapacity(min(options.maxHeaderSectionBytes, max(512, lastHeadByteCount + 128)))
        }
        // Input from `copyStart` on belongs in the section; `index` is where the scan goes on.
        var copyStart = start
        var index = start
        var done = false
        while index < input.count {
            guard let found = memchr(base + index, Int32(UInt8.lf), input.count - index) else {
                index = input.count
                break
            }
            let lineFeed = base.distance(to: UnsafeRawPointer(found))
            index = lineFeed + 1
            // Where the LF lands in the section once the bytes up to it are copied.
            let lineFeedInSection = section.count + (lineFeed - copyStart)
            if lineFeedInSection + 1 > options.maxHeaderSectionBytes { throw .headerSectionTooLarge }

            // The line just completed runs from lineStart to that LF.
            var contentEnd = lineFeedInSection
            if contentEnd > lineStart {
                let beforeLineFeed = lineFeed > copyStart ? input[lineFeed - 1] : section[section.count - 1]
                if beforeLineFeed == .cr { contentEnd -= 1 }
            }
            if contentEnd == lineFeedInSection && !options.allowsBareLineFeed { throw .bareLineFeed }
            if contentEnd == lineStart {
                // An empty line where the status line should be: skipped once per head.
                if lineStart == 0, !state.isReadingTrailers, options.skipsOneEmptyLineBeforeStatusLine, !skippedEmptyLine {
                    skippedEmptyLine = true
                    section.removeAll(keepingCapacity: true)
                    copyStart = index
                    continue
                }
                done = true
                break
            }
            lineStart = lineFeedInSection + 1
            sectionLines += 1
            // The head's first line is the status line, which is not a field.
            let fieldLines = state.isReadingTrailers ? sectionLines : sectionLines - 1
            if fieldLines > options.maxHeaderFieldCount { throw .tooManyHeaderFields }
        }
        if index > copyStart {
            section.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[copyStart..<index]))
            try checkSectionSize()
        }
        return (index - start, done)
    }

    private func checkSectionSize() throws(HTTP1ResponseError) {
        if section.count > options.maxHeaderSectionBytes { throw .headerSectionTooLarge }
    }

    /// Finishes a head: parses it and, unless it is an interim response (after which another
    /// head follows), chooses the body's framing.
    mutating func finishHead() throws(HTTP1ResponseError) -> HTTPResponseHead {
        if options.allowsObsoleteLineFolding { unfoldLines(firstFieldLine: 1) }
        let statusLine: StatusLine
        let parsed: ParsedFields
        do {
            statusLine = try parseStatusLine()
            parsed = try parseFields(firstLine: statusLine.end)
        } catch {
            throw blameBareCarriageReturn(error)
        }
        let head = HTTPResponseHead(
            version: statusLine.version, status: statusLine.status,
            reason: statusLine.reason, fields: parsed.fields
        )
        return try withBytes(section) { (bytes: UnsafeRawBufferPointer) throws(HTTP1ResponseError) -> HTTPResponseHead in
            try accept(head, parsed.framing, in: bytes)
        }
    }

    /// Takes a parsed head whose section is `bytes` (where the ranges of `framing` point): an
    /// interim one is counted, a final one gets its body's framing.
    private mutating func accept(
        _ head: consuming HTTPResponseHead, _ framing: FramingFields, in bytes: UnsafeRawBufferPointer
    ) throws(HTTP1ResponseError) -> HTTPResponseHead {
        if head.isInterim {
            informationalCount += 1
            if informationalCount > options.maxInformationalResponses { throw .tooManyInformationalResponses }
            resetSection()
            return head
        }
        head.validatedContentLength = try chooseFraming(head, framing, in: bytes)
        lastHeadByteCount = bytes.count
        resetSection()
        return head
    }

    /// A head that is whole in `input` from `start`, read in one pass and copied once.
    ///
    /// The line-by-line path finds every line end twice (gathering the section, then parsing
    /// it) and checks each value in a pass of its own; here each line is scanned once, its
    /// name as a token up to the colon and its value up to the CR. Returns nil, having changed
    /// nothing, when the input holds no whole head that passes every rule as it stands (cut
    /// short, malformed, folded, over a limit, an empty line before the status line): the
    /// line-by-line path then takes the same bytes and reports what is wrong.
    mutating func parseWholeHead(
        _ input: UnsafeRawBufferPointer, from start: Int
    ) throws(HTTP1ResponseError) -> (used: Int, head: HTTPResponseHead)? {
        let window = UnsafeRawBufferPointer(rebasing: input[start..<(start + min(input.count - start, options.maxHeaderSectionBytes))])
        guard let whole = Self.scanWholeHead(window, options: options) else { return nil }
        // The bytes go straight into the head's field storage; `section` is not used.
        let headBytes = UnsafeRawBufferPointer(rebasing: window[..<whole.end])
        let head = HTTPResponseHead(
            version: whole.statusLine.version, status: whole.statusLine.status, reason: whole.statusLine.reason,
            fields: HTTPFields(validatedStorage: Array(headBytes), locations: whole.locations, nameBits: whole.nameBits)
        )
        return (whole.end, try accept(head, whole.framing, in: headBytes))
    }

    private struct WholeHead {
        var statusLine: StatusLine
        var locations: [HTTPFields.Location]
        /// `HTTPFields.nameBit(count:first:last:)` of every name, as the scanner found them.
        var nameBits: UInt64
        var framing: FramingFields
        /// Offset just past the empty line that ends the head.
        var end: Int
    }

    /// The status line and field lines of a head that ends inside `bytes` and breaks no rule
    /// with `options`; nil otherwise.
    private static func scanWholeHead(_ bytes: UnsafeRawBufferPointer, options: HTTP1ParserOptions) -> WholeHead? {
        guard let base = bytes.baseAddress, let found = memchr(base, Int32(UInt8.lf), bytes.count) else { return nil }
        let statusLineFeed = base.distance(to: UnsafeRawPointer(found))
        let statusLineEnd = statusLineFeed > 0 && bytes[statusLineFeed - 1] == .cr ? statusLineFeed - 1 : statusLineFeed
        guard statusLineEnd < statusLineFeed || options.allowsBareLineFeed,
              let statusLine = try? parseStatusLine(bytes, contentEnd: statusLineEnd, next: statusLineFeed + 1) else { return nil }
        // The field lines, in C (CCourierScan): names and values are checked sixteen bytes at
        // a time, up to `linesAtOnce` lines a call. The scanner writes its locations straight
        // into a buffer of `HTTPFields.Location`, whose four `UInt32`s it shares
        // (`FieldLineScannerTests.sharesTheLayout` holds the two to the same layout).
        return withUnsafeTemporaryAllocation(of: HTTPFields.Location.self, capacity: Self.linesAtOnce) { lines -> WholeHead? in
            var framing = FramingFields()
            var locations: [HTTPFields.Location] = []
            var next = statusLine.end
            var finished: Int32 = 0
            var nameBits: UInt64 = 0
            while finished == 0 {
                let room = min(Self.linesAtOnce, options.maxHeaderFieldCount - locations.count)
                let count = UnsafeMutableRawPointer(lines.baseAddress!).withMemoryRebound(
                    to: courier_field_location.self, capacity: Self.linesAtOnce
                ) { scanned in
                    courier_scan_field_lines(
                        base.assumingMemoryBound(to: UInt8.self), bytes.count, next, options.allowsBareLineFeed ? 1 : 0,
                        scanned, max(0, room), &next, &finished, &nameBits
                    )
                }
                // A line the scanner does not take, or one field too many.
                guard count >= 0, finished == 1 || room > 0 else { return nil }
                let found = UnsafeBufferPointer(rebasing: lines[..<count])
                for location in found { noteFramingField(location, in: bytes, into: &framing) }
                if locations.isEmpty { locations.reserveCapacity(count) }
                locations.append(contentsOf: found)
            }
            return WholeHead(statusLine: statusLine, locations: locations, nameBits: nameBits, framing: framing, end: next)
        }
    }

    /// The most field lines one call of the scanner reads: a buffer of 512 bytes, which stays
    /// on the stack (a temporary allocation over about 1 KiB goes to the heap).
    static var linesAtOnce: Int { 32 }

    /// The error to report for a section that failed to parse with `error`: a bare CR anywhere
    /// in it comes first.
    ///
    /// Every CR in a section must be the first half of a CRLF (RFC 9112 section 2.2). The
    /// section is not searched for one up front: no rule of a status line or a field line
    /// admits a CR (the line ends take the one before each LF), so a bare CR always fails the
    /// parse, and only then is the section searched, to name it.
    func blameBareCarriageReturn(_ error: HTTP1ResponseError) -> HTTP1ResponseError {
        let bare: Bool = section.withUnsafeBytes { bytes in
            guard let base = bytes.baseAddress else { return false }
            var index = 0
            while index < bytes.count, let found = memchr(base + index, Int32(UInt8.cr), bytes.count - index) {
                let cr = base.distance(to: UnsafeRawPointer(found))
                if cr + 1 >= bytes.count || bytes[cr + 1] != .lf { return true }
                index = cr + 2
            }
            return false
        }
        return bare ? .bareCarriageReturn : error
    }

    /// Replaces each obs-fold (a line end followed by whitespace) with spaces, joining the
    /// continuation to the line before. The first field line (line `firstFieldLine`, counting
    /// from 0) cannot be a continuation.
    mutating func unfoldLines(firstFieldLine: Int) {
        var index = 0
        var lineNumber = 0
        while index < section.count {
            if section[index] == .lf, index + 1 < section.count, section[index + 1].isOptionalWhitespace, lineNumber >= firstFieldLine {
                section[index] = .space
                if index > 0 && section[index - 1] == .cr { section[index - 1] = .space }
            } else if section[index] == .lf {
                lineNumber += 1
            }
            index += 1
        }
    }

    struct StatusLine {
        var version: HTTPVersion
        var status: Int
        var reason: String
        /// Offset of the line after the status line.
        var end: Int
    }

    /// `status-line = HTTP-version SP status-code SP [ reason-phrase ]` (RFC 9112 section 4),
    /// also accepting the status code directly followed by the line end.
    private func parseStatusLine() throws(HTTP1ResponseError) -> StatusLine {
        try withBytes(section) { (bytes: UnsafeRawBufferPointer) throws(HTTP1ResponseError) -> StatusLine in
            let lineEnd = Self.lineEndOffset(in: bytes, from: 0)
            return try Self.parseStatusLine(bytes, contentEnd: lineEnd.content, next: lineEnd.next)
        }
    }

    /// The status line at the start of `bytes`, whose content ends at `contentEnd` and whose
    /// next line starts at `next`.
    private static func parseStatusLine(
        _ bytes: UnsafeRawBufferPointer, contentEnd: Int, next: Int
    ) throws(HTTP1ResponseError) -> StatusLine {
        // "HTTP/" DIGIT "." DIGIT SP 3DIGIT
        guard contentEnd >= 12 else { throw .invalidStatusLine }
        guard bytes[0] == UInt8(ascii: "H"), bytes[1] == UInt8(ascii: "T"), bytes[2] == UInt8(ascii: "T"),
              bytes[3] == UInt8(ascii: "P"), bytes[4] == UInt8(ascii: "/") else {
            throw .invalidStatusLine
        }
        guard bytes[5].isDigit, bytes[6] == UInt8(ascii: "."), bytes[7].isDigit, bytes[8] == .space else {
            throw .invalidStatusLine
        }
        let major = Int(bytes[5] - UInt8(ascii: "0")), minor = Int(bytes[7] - UInt8(ascii: "0"))
        guard major == 1 else { throw .unsupportedHTTPVersion }
        guard bytes[9].isDigit, bytes[10].isDigit, bytes[11].isDigit else { throw .invalidStatusCode }
        let status = Int(bytes[9] - 48) * 100 + Int(bytes[10] - 48) * 10 + Int(bytes[11] - 48)
        guard (100...599).contains(status) else { throw .invalidStatusCode }
        var reason = ""
        if contentEnd > 12 {
            guard bytes[12] == .space else { throw .invalidStatusLine }
            let reasonBytes = UnsafeRawBufferPointer(rebasing: bytes[13..<contentEnd])
            guard HTTPFieldValidation.fieldValuePrefixCount(reasonBytes) == reasonBytes.count else { throw .invalidStatusLine }
            // Nearly every response says OK: that one is not decoded (about 1% of a parse).
            reason = reasonBytes.count == 2 && reasonBytes[0] == UInt8(ascii: "O") && reasonBytes[1] == UInt8(ascii: "K")
                ? "OK" : String(decoding: reasonBytes, as: UTF8.self)
        }
        return StatusLine(version: HTTPVersion(major: major, minor: minor), status: status, reason: reason, end: next)
    }

    /// Parses the field lines from `firstLine` to the empty line that ends the section.
    ///
    /// The work is in static functions over the section's bytes: as methods called from a
    /// closure, each call copied the whole parser, and a closure that captured the result
    /// copied it again on the way out.
    func parseFields(firstLine: Int) throws(HTTP1ResponseError) -> ParsedFields {
        var framing = FramingFields()
        let locations = try withBytes(section) { (bytes: UnsafeRawBufferPointer) throws(HTTP1ResponseError) in
            try Self.fieldLocations(in: bytes, firstLine: firstLine, framing: &framing)
        }
        return ParsedFields(fields: HTTPFields(validatedStorage: section, locations: locations), framing: framing)
    }

    /// The location of every field line from `firstLine` on, noting the framing fields.
    private static func fieldLocations(
        in bytes: UnsafeRawBufferPointer, firstLine: Int, framing: inout FramingFields
    ) throws(HTTP1ResponseError) -> [HTTPFields.Location] {
        var locations: [HTTPFields.Location] = []
        locations.reserveCapacity(16)
        var lineStart = firstLine
        while lineStart < bytes.count {
            let line = lineEndOffset(in: bytes, from: lineStart)
            if line.content == lineStart { break }
            let location = try parseFieldLine(bytes, lineStart..<line.content)
            locations.append(location)
            noteFramingField(location, in: bytes, into: &framing)
            lineStart = line.next
        }
        return locations
    }

    /// Where the line starting at `start` ends: its content end and the start of the next line.
    private static func lineEndOffset(in bytes: UnsafeRawBufferPointer, from start: Int) -> (content: Int, next: Int) {
        let found = memchr(bytes.baseAddress! + start, Int32(UInt8.lf), bytes.count - start)!
        let lineFeed = bytes.baseAddress!.distance(to: UnsafeRawPointer(found))
        let content = lineFeed > start && bytes[lineFeed - 1] == .cr ? lineFeed - 1 : lineFeed
        return (content, lineFeed + 1)
    }

    /// `field-line = field-name ":" OWS field-value OWS` (RFC 9112 section 5).
    private static func parseFieldLine(
        _ bytes: UnsafeRawBufferPointer, _ line: Range<Int>
    ) throws(HTTP1ResponseError) -> HTTPFields.Location {
        if bytes[line.lowerBound].isOptionalWhitespace { throw .obsoleteLineFolding }
        var index = line.lowerBound + HTTPFieldValidation.tokenPrefixCount(UnsafeRawBufferPointer(rebasing: bytes[line]))
        let nameEnd = index
        guard index < line.upperBound else { throw .invalidFieldLine }
        if bytes[index] != .colon {
            // Find out which rule broke: whitespace before the colon, a bad name, or no colon.
            while index < line.upperBound && bytes[index].isOptionalWhitespace { index += 1 }
            if index < line.upperBound && bytes[index] == .colon && nameEnd > line.lowerBound {
                throw .whitespaceBeforeColon
            }
            let hasColon = UnsafeRawBufferPointer(rebasing: bytes[line]).contains(.colon)
            throw hasColon ? .invalidFieldName : .invalidFieldLine
        }
        guard nameEnd > line.lowerBound else { throw .invalidFieldName }
        var valueStart = nameEnd + 1
        var valueEnd = line.upperBound
        while valueStart < valueEnd && bytes[valueStart].isOptionalWhitespace { valueStart += 1 }
        while valueEnd > valueStart && bytes[valueEnd - 1].isOptionalWhitespace { valueEnd -= 1 }
        guard HTTPFieldValidation.isValidFieldValue(UnsafeRawBufferPointer(rebasing: bytes[valueStart..<valueEnd])) else {
            throw .invalidFieldValue
        }
        return HTTPFields.Location(name: line.lowerBound..<nameEnd, value: valueStart..<valueEnd)
    }

    private static func noteFramingField(
        _ location: HTTPFields.Location, in bytes: UnsafeRawBufferPointer, into framing: inout FramingFields
    ) {
        // By length first: most names are none of the three. Then eight bytes at a time,
        // lower-cased by setting bit 5 of each: exact for a name already checked to be a token,
        // since only the letters, '-' and CR (no token byte) land on a letter or '-' that way.
        let start = location.name.lowerBound
        switch location.name.count {
        case 14:
            // "content-length": bytes 0-7 and 6-13.
            if lowered(bytes, start) == 0x2d74_6e65_746e_6f63, lowered(bytes, start + 6) == 0x6874_676e_656c_2d74 {
                framing.contentLengths.append(location.value)
            }
        case 17:
            // "transfer-encoding": bytes 0-7, 8-15 and 9-16.
            if lowered(bytes, start) == 0x7265_6673_6e61_7274, lowered(bytes, start + 8) == 0x6e69_646f_636e_652d,
               lowered(bytes, start + 9) == 0x676e_6964_6f63_6e65 {
                framing.transferEncodings.append(location.value)
            }
        case 10:
            // "connection": bytes 0-7 and 2-9.
            if lowered(bytes, start) == 0x6974_6365_6e6e_6f63, lowered(bytes, start + 2) == 0x6e6f_6974_6365_6e6e {
                framing.connectionValues.append(location.value)
            }
        default:
            break
        }
    }

    /// The eight bytes at `offset`, little-endian, with bit 5 of each set.
    @inline(__always)
    private static func lowered(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        UInt64(littleEndian: bytes.baseAddress!.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) | 0x2020_2020_2020_2020
    }
}

/// Compares bytes with a lower-case ASCII literal, ignoring the case of the bytes.
func asciiCaseInsensitiveEquals(_ bytes: UnsafeRawBufferPointer, _ lowercase: StaticString) -> Bool {
    HTTPFieldValidation.equalsLowercased(bytes, UnsafeRawBufferPointer(start: lowercase.utf8Start, count: lowercase.utf8CodeUnitCount))
}

extension HTTP1ResponseParser.State {
    var isReadingTrailers: Bool {
        if case .trailers = self { return true }
        return false
    }
}

/// `Array.withUnsafeBytes` with a typed error (the standard one rethrows `any Error`).
func withBytes<R>(
    _ array: [UInt8], _ body: (UnsafeRawBufferPointer) throws(HTTP1ResponseError) -> R
) throws(HTTP1ResponseError) -> R {
    let result: Result<R, HTTP1ResponseError> = array.withUnsafeBytes { bytes in
        do throws(HTTP1ResponseError) { return .success(try body(bytes)) } catch { return .failure(error) }
    }
    return try result.get()
}

/// The value ranges of one field name in a section: usually none or one, so the first is kept
/// inline and only repeats allocate.
struct FieldRanges {
    private var first: Range<Int>?
    /// Nil until a repeat: no array to retain when the struct is copied.
    private var more: [Range<Int>]?

    var isEmpty: Bool { first == nil }

    mutating func append(_ range: Range<Int>) {
        if first == nil {
            first = range
        } else if more == nil {
            more = [range]
        } else {
            more!.append(range)
        }
    }

    func forEach(_ body: (Range<Int>) -> Void) {
        guard let first else { return }
        body(first)
        for range in more ?? [] { body(range) }
    }
}

extension HTTPResponseHead {
    /// A 1xx response other than 101: another head follows on the same connection.
    var isInterim: Bool { isInformational && status != 101 }
}
