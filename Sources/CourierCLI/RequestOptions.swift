import ArgumentParser
import Courier
import Foundation

/// How the request is made, with curl's option names: its body (`-d` and friends, `--json`,
/// `-G`), method shortcuts (`-I`), fields (`-A`, `-e`), redirects, timeouts and protocol
/// versions.
struct RequestOptions: ParsableArguments {
    @Option(name: [.customShort("d"), .customLong("data")], help: "Send this body (POST unless -X, -G or -I say otherwise); @FILE sends a file without its line ends, @- standard input. Repeats are joined with &.")
    var data: [String] = []

    @Option(name: .customLong("data-binary"), help: "As -d, but @FILE is sent exactly as it is.")
    var dataBinary: [String] = []

    @Option(name: .customLong("data-raw"), help: "As -d, with no special meaning for @.")
    var dataRaw: [String] = []

    @Option(name: .customLong("data-urlencode"), help: "As -d, percent-encoding the content: CONTENT, =CONTENT, NAME=CONTENT, @FILE or NAME@FILE.")
    var dataURLEncode: [String] = []

    @Option(name: .customLong("json"), help: "Send this JSON body (@FILE, @- as with --data-binary), with Content-Type and Accept application/json.")
    var json: [String] = []

    @Option(name: [.customShort("F"), .customLong("form")], help: "A multipart/form-data part: NAME=VALUE, NAME=@FILE (a file, its name and type sent), NAME=<FILE (a file's text); ;type=TYPE and ;filename=NAME after it. Repeatable; sends a POST.")
    var form: [String] = []

    @Option(name: .customLong("form-string"), help: "As -F NAME=VALUE, with no special meaning for @, < and ;.")
    var formString: [String] = []

    @Flag(name: [.customShort("G"), .customLong("get")], help: "Put the -d data in the URL's query and send a GET.")
    var get = false

    @Flag(name: [.customShort("I"), .customLong("head")], help: "Send a HEAD request and show the response head only.")
    var head = false

    @Option(name: [.customShort("A"), .customLong("user-agent")], help: "The User-Agent field.")
    var userAgent: String?

    @Option(name: [.customShort("e"), .customLong("referer")], help: "The Referer field.")
    var referer: String?

    @Option(name: .customLong("max-redirs"), help: "With -L: follow at most this many redirects (exit 47 past them).")
    var maxRedirects: Int?

    @Option(name: .customLong("connect-timeout"), help: "Give up connecting after this many seconds.")
    var connectTimeout: Double?

    @Flag(name: .customLong("compressed"), help: "Ask for a compressed response (gzip, deflate, br) and decode it.")
    var compressed = false

    @Flag(name: .customLong("http1.1"), help: "Use HTTP/1.1 only.")
    var http11 = false

    @Flag(name: .customLong("http2"), help: "Use HTTP/2 when the server offers it over TLS (the default).")
    var http2 = false

    @Flag(name: .customLong("http2-prior-knowledge"), help: "Use HTTP/2 without asking first, also for http: URLs.")
    var http2PriorKnowledge = false

    @Flag(name: .customLong("tlsv1.2"), help: "Use TLS 1.2 or later (the default floor).")
    var tls12 = false

    @Flag(name: .customLong("tlsv1.3"), help: "Use TLS 1.3 or later.")
    var tls13 = false

    /// True when some body option was given.
    var hasBody: Bool { !(data.isEmpty && dataBinary.isEmpty && dataRaw.isEmpty && dataURLEncode.isEmpty && json.isEmpty) }

    /// The body the data options make: each piece read or encoded as curl does, pieces joined
    /// with `&` (`--json` pieces are joined as they are). Kinds come in a fixed order (-d,
    /// --data-binary, --data-raw, --data-urlencode), not the command line's.
    func body(readStandardInput: () -> Data = { FileHandle.standardInput.readDataToEndOfFile() }) throws -> Data? {
        guard hasBody else { return nil }
        if !json.isEmpty {
            guard data.isEmpty && dataBinary.isEmpty && dataRaw.isEmpty && dataURLEncode.isEmpty else {
                throw ValidationError("--json excludes -d, --data-binary, --data-raw and --data-urlencode")
            }
            var joined = Data()
            for piece in json { joined.append(try Self.read(piece, strippingLineEnds: false, readStandardInput)) }
            return joined
        }
        var pieces: [Data] = []
        for piece in data { pieces.append(try Self.read(piece, strippingLineEnds: true, readStandardInput)) }
        for piece in dataBinary { pieces.append(try Self.read(piece, strippingLineEnds: false, readStandardInput)) }
        for piece in dataRaw { pieces.append(Data(piece.utf8)) }
        for piece in dataURLEncode { pieces.append(try Self.urlEncoded(piece, readStandardInput)) }
        // Joined a piece at a time: joining them as a sequence went byte by byte (a second of
        // CPU for a 64 MB file), and one piece, a file's most often, is the body as it is.
        if pieces.count == 1 { return pieces[0] }
        var joined = Data(capacity: pieces.reduce(pieces.count - 1) { $0 + $1.count })
        for (index, piece) in pieces.enumerated() {
            if index > 0 { joined.append(UInt8(ascii: "&")) }
            joined.append(piece)
        }
        return joined
    }

    /// A piece's bytes: `@FILE` (or `@-`) read, else the text itself.
    private static func read(_ piece: String, strippingLineEnds: Bool, _ readStandardInput: () -> Data) throws -> Data {
        guard piece.hasPrefix("@") else { return Data(piece.utf8) }
        var bytes = try contents(of: String(piece.dropFirst()), readStandardInput)
        // As curl's -d @FILE: carriage returns and newlines are left out.
        if strippingLineEnds { removeLineEnds(&bytes) }
        return bytes
    }

    /// Removes carriage returns and newlines from `bytes` in place, moving a run at a time (a
    /// byte at a time through `filter`, into a second copy, a large file took seconds).
    static func removeLineEnds(_ bytes: inout Data) {
        let kept = bytes.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) -> Int in
            var kept = 0
            var runStart = 0
            func keepRun(to end: Int) {
                guard end > runStart else { return }
                if kept != runStart {
                    // The run moves left, onto bytes it may overlap.
                    memmove(buffer.baseAddress! + kept, buffer.baseAddress! + runStart, end - runStart)
                }
                kept += end - runStart
            }
            for index in 0..<buffer.count where buffer[index] == 0x0A || buffer[index] == 0x0D {
                keepRun(to: index)
                runStart = index + 1
            }
            keepRun(to: buffer.count)
            return kept
        }
        bytes.count = kept
    }

    private static func contents(of path: String, _ readStandardInput: () -> Data) throws -> Data {
        if path == "-" { return readStandardInput() }
        guard let bytes = FileManager.default.contents(atPath: path) else {
            throw CLIFailure(message: "cannot read \(path) for the request body", code: 26)
        }
        return bytes
    }

    /// `--data-urlencode`'s forms, as curl reads them.
    private static func urlEncoded(_ piece: String, _ readStandardInput: () -> Data) throws -> Data {
        // As a form: unreserved characters stay, a space is "+", every other byte is %XX.
        // Built as bytes: a `String(format:)` a byte took seconds for a file of a few MB.
        func encode(_ bytes: Data) -> String {
            let hexDigits: StaticString = "0123456789ABCDEF"
            var encoded: [UInt8] = []
            encoded.reserveCapacity(bytes.count * 3)
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                     UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                    encoded.append(byte)
                case UInt8(ascii: " "):
                    encoded.append(UInt8(ascii: "+"))
                default:
                    encoded.append(UInt8(ascii: "%"))
                    encoded.append(hexDigits.utf8Start[Int(byte >> 4)])
                    encoded.append(hexDigits.utf8Start[Int(byte & 0xF)])
                }
            }
            return String(decoding: encoded, as: UTF8.self)
        }
        if let equals = piece.firstIndex(of: "="), !piece[..<equals].contains("@") {
            let name = piece[..<equals]
            let content = encode(Data(piece[piece.index(after: equals)...].utf8))
            return Data((name.isEmpty ? content : "\(name)=\(content)").utf8)
        }
        if let at = piece.firstIndex(of: "@") {
            let name = piece[..<at]
            let content = encode(try contents(of: String(piece[piece.index(after: at)...]), readStandardInput))
            return Data((name.isEmpty ? content : "\(name)=\(content)").utf8)
        }
        return Data(encode(Data(piece.utf8)).utf8)
    }

    /// Applies the method, body and fields to `request`; the URL changes with `-G`.
    func apply(to request: inout URLRequest, explicitMethod: String?) throws {
        if get && head { throw ValidationError("-G and -I exclude each other") }
        if !form.isEmpty || !formString.isEmpty {
            if hasBody || get { throw ValidationError("-F excludes -d, --json and -G") }
            let multipart = try MultipartForm(parts: form, strings: formString)
            request.httpBody = multipart.body
            request.setValue("multipart/form-data; boundary=\(multipart.boundary)", forHTTPHeaderField: "Content-Type")
            request.httpMethod = "POST"
        }
        let body = try self.body()
        if let body {
            if get, let url = request.url, var components = URLComponents(url: url, resolvingAgainstBaseURL: false) {
                let query = String(decoding: body, as: UTF8.self)
                components.percentEncodedQuery = components.percentEncodedQuery.map { $0.isEmpty ? query : "\($0)&\(query)" } ?? query
                request.url = components.url ?? url
                request.httpMethod = "GET"
            } else {
                request.httpBody = body
                request.httpMethod = "POST"
                // As curl: a form unless said otherwise, whatever the method.
                if json.isEmpty, request.value(forHTTPHeaderField: "Content-Type") == nil {
                    request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
                }
                if !json.isEmpty {
                    if request.value(forHTTPHeaderField: "Content-Type") == nil { request.setValue("application/json", forHTTPHeaderField: "Content-Type") }
                    if request.value(forHTTPHeaderField: "Accept") == nil { request.setValue("application/json", forHTTPHeaderField: "Accept") }
                }
            }
        }
        if head { request.httpMethod = "HEAD" }
        if let explicitMethod { request.httpMethod = explicitMethod }
        if let userAgent, request.value(forHTTPHeaderField: "User-Agent") == nil { request.setValue(userAgent, forHTTPHeaderField: "User-Agent") }
        if let referer, request.value(forHTTPHeaderField: "Referer") == nil { request.setValue(referer, forHTTPHeaderField: "Referer") }
    }

    /// Applies the protocol, TLS and timeout choices to the session's configuration.
    func apply(to configuration: URLSessionConfiguration) throws {
        if [http11, http2, http2PriorKnowledge].filter({ $0 }).count > 1 {
            throw ValidationError("--http1.1, --http2 and --http2-prior-knowledge exclude each other")
        }
        if http11 { configuration.courierHTTP1Only = true }
        if http2PriorKnowledge { configuration.http2PriorKnowledge = true }
        if tls13 {
            configuration.tlsMinimumSupportedProtocolVersion = .TLSv13
        } else if tls12 {
            configuration.tlsMinimumSupportedProtocolVersion = .TLSv12
        }
        if let connectTimeout {
            guard connectTimeout > 0 else { throw ValidationError("--connect-timeout takes a number of seconds above 0") }
            configuration.courierConnectTimeout = connectTimeout
        }
        if let maxRedirects, maxRedirects < 0 { throw ValidationError("--max-redirs takes 0 or more") }
    }
}
