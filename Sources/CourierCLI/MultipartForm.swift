import ArgumentParser
import Foundation

/// A `multipart/form-data` body (RFC 7578) made from curl's `-F` and `--form-string` values.
struct MultipartForm {
    let boundary: String
    private(set) var body = Data()

    init(parts: [String], strings: [String]) throws {
        let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyz")
        boundary = String(repeating: "-", count: 24) + String((0..<22).map { _ in alphabet.randomElement()! })
        for part in parts { try add(part, literal: false) }
        for part in strings { try add(part, literal: true) }
        body.append(Data("--\(boundary)--\r\n".utf8))
    }

    /// One `NAME=CONTENT[;type=T][;filename=F]` value.
    private mutating func add(_ part: String, literal: Bool) throws {
        guard let equals = part.firstIndex(of: "="), equals != part.startIndex else {
            throw ValidationError("-F takes NAME=CONTENT: \(part)")
        }
        let name = String(part[..<equals])
        var content = String(part[part.index(after: equals)...])
        var type: String?
        var fileName: String?
        if !literal, content.hasPrefix("@") || content.hasPrefix("<") {
            // Modifiers follow a file name only; a value's semicolons are its own.
            var pieces = content.components(separatedBy: ";")
            content = pieces.removeFirst()
            for piece in pieces {
                let trimmed = piece.trimmingCharacters(in: .whitespaces)
                if trimmed.hasPrefix("type=") { type = String(trimmed.dropFirst(5)) }
                if trimmed.hasPrefix("filename=") { fileName = String(trimmed.dropFirst(9)) }
            }
        }
        var head = "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quoted(name))\""
        let bytes: Data
        if !literal, content.hasPrefix("@") {
            let path = String(content.dropFirst())
            guard let read = path == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: path) else {
                throw CLIFailure(message: "cannot read \(path) for -F", code: 26)
            }
            bytes = read
            let shownName = fileName ?? (path == "-" ? "-" : (path as NSString).lastPathComponent)
            head += "; filename=\"\(Self.quoted(shownName))\"\r\nContent-Type: \(type ?? Self.contentType(forFileNamed: shownName))"
        } else if !literal, content.hasPrefix("<") {
            let path = String(content.dropFirst())
            guard let read = path == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: path) else {
                throw CLIFailure(message: "cannot read \(path) for -F", code: 26)
            }
            bytes = read
            if let type { head += "\r\nContent-Type: \(type)" }
        } else {
            bytes = Data(content.utf8)
        }
        body.append(Data((head + "\r\n\r\n").utf8))
        body.append(bytes)
        body.append(Data("\r\n".utf8))
    }

    /// A name or file name inside quotes: `"` and backslashes escaped, as curl does.
    private static func quoted(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    }

    /// curl's guess from a file name's extension, else application/octet-stream.
    static func contentType(forFileNamed name: String) -> String {
        switch (name as NSString).pathExtension.lowercased() {
        case "gif": "image/gif"
        case "jpg", "jpeg": "image/jpeg"
        case "png": "image/png"
        case "svg": "image/svg+xml"
        case "txt": "text/plain"
        case "htm", "html": "text/html"
        case "pdf": "application/pdf"
        case "xml": "application/xml"
        default: "application/octet-stream"
        }
    }
}
