import Foundation

/// curl's `-K FILE` / `--config FILE`: a file of options, one per line, read as if they were on
/// the command line where `-K` stands. A line is `name value`, `name = value` or `name: value`;
/// a long name may leave out its `--`; a value with spaces is double-quoted, with `\"`, `\\`,
/// `\t`, `\n`, `\r` inside; `#` starts a comment line; `url = …` names a URL. `-K -` reads
/// standard input.
enum ConfigFile {
    struct Failure: Error {
        var message: String
    }

    /// `arguments` (without the program name) with every `-K`/`--config` expanded.
    static func expand(_ arguments: [String], depth: Int = 0) throws -> [String] {
        var expanded: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            var path: String?
            if argument == "-K" || argument == "--config" {
                guard index + 1 < arguments.count else { throw Failure(message: "\(argument) needs a file") }
                path = arguments[index + 1]
                index += 1
            } else if argument.hasPrefix("--config=") {
                path = String(argument.dropFirst("--config=".count))
            } else if argument.hasPrefix("-K"), argument.count > 2 {
                path = String(argument.dropFirst(2))
            }
            index += 1
            guard let path else {
                expanded.append(argument)
                continue
            }
            guard depth < 8 else { throw Failure(message: "config files nest too deep (\(path))") }
            let data = path == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: path)
            guard let data else { throw Failure(message: "cannot read the config file \(path)") }
            expanded += try expand(parse(String(decoding: data, as: UTF8.self), source: path), depth: depth + 1)
        }
        return expanded
    }

    /// The arguments a config file's text stands for.
    static func parse(_ text: String, source: String = "config") throws -> [String] {
        var arguments: [String] = []
        for (number, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            var line = Substring(rawLine).drop { $0 == " " || $0 == "\t" }
            guard let first = line.first, first != "#" else { continue }
            let name = line.prefix { !($0 == " " || $0 == "\t" || $0 == "=" || $0 == ":") }
            line = line.dropFirst(name.count).drop { $0 == " " || $0 == "\t" }
            if let separator = line.first, separator == "=" || separator == ":" {
                line = line.dropFirst().drop { $0 == " " || $0 == "\t" }
            }
            var value: String?
            if line.first == "\"" {
                value = try quoted(line.dropFirst(), line: number + 1, source: source)
            } else if !line.isEmpty {
                value = String(line.prefix { !($0 == " " || $0 == "\t") })
            }
            let option = name.hasPrefix("-") ? String(name) : "--" + name
            if option == "--url" {
                guard let value else { throw Failure(message: "\(source) line \(number + 1): url needs a value") }
                arguments.append(value)
                continue
            }
            arguments.append(option)
            if let value { arguments.append(value) }
        }
        return arguments
    }

    private static func quoted(_ text: Substring, line: Int, source: String) throws -> String {
        var value = ""
        var escaped = false
        for character in text {
            if escaped {
                switch character {
                case "t": value.append("\t")
                case "n": value.append("\n")
                case "r": value.append("\r")
                case "v": value.append("\u{0B}")
                default: value.append(character)
                }
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == "\"" {
                return value
            } else {
                value.append(character)
            }
        }
        throw Failure(message: "\(source) line \(line): a quoted value is not closed")
    }
}
