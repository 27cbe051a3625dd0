import ArgumentParser
import Courier
import Foundation

/// What courier tells, and where, with curl's option names: `-s`/`-S`, `-D`, `-w`,
/// `--fail-with-body`, `--output-dir`.
struct ReportOptions: ParsableArguments {
    @Flag(name: [.customShort("s"), .customLong("silent")], help: "Silent: no progress meter and no error messages (with -S, errors still).")
    var silent = false

    @Flag(name: [.customShort("#"), .customLong("progress-bar")], help: "Show progress as a bar of # rather than the table.")
    var progressBar = false

    @Flag(name: [.customShort("S"), .customLong("show-error")], help: "With -s: print error messages anyway.")
    var showError = false

    @Option(name: [.customShort("D"), .customLong("dump-header")], help: "Write the response heads (each redirect's too) to this file; - for standard output.")
    var dumpHeader: String?

    @Option(name: [.customShort("w"), .customLong("write-out")], help: "After the transfer, print this text with %{variable}s filled in (http_code, time_total, size_download, url_effective, …); @FILE reads it from a file.")
    var writeOut: String?

    @Option(name: .customLong("trace-ascii"), help: "Write every note and every byte sent and received (heads, -d bodies, the body) to this file, - for standard output, as text; replaces -v.")
    var traceASCII: String?

    @Option(name: .customLong("trace"), help: "As --trace-ascii, each byte shown in hex beside its character.")
    var trace: String?

    @Flag(name: .customLong("fail-with-body"), help: "As -f, exit with 22 on a status of 400 or above, but still write the body.")
    var failWithBody = false

    @Option(name: .customLong("output-dir"), help: "Put the -o and -O files in this directory.")
    var outputDirectory: String?

    @Flag(name: .customLong("create-dirs"), help: "Create the directories -o, -D and --output-dir name when missing.")
    var createDirectories = false

    /// With --create-dirs, makes the directory `path` goes in (or --output-dir for -O).
    func prepareDirectory(for path: String?) throws {
        guard createDirectories else { return }
        var folders: [String] = []
        if let outputDirectory { folders.append(outputDirectory) }
        if let path, path != "-" { folders.append((place(path) as NSString).deletingLastPathComponent) }
        for folder in folders where !folder.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            } catch {
                throw CLIFailure(message: "cannot create the directory \(folder): \(error.localizedDescription)", code: 23)
            }
        }
    }

    /// Prints `courier: message` on standard error, unless -s (without -S) silenced it.
    func complain(_ message: String) {
        guard !silent || showError else { return }
        FileHandle.standardError.write(Data("courier: \(message)\n".utf8))
    }

    /// `path` placed in --output-dir when it is relative.
    func place(_ path: String) -> String {
        guard let outputDirectory, !path.hasPrefix("/"), path != "-" else { return path }
        return (outputDirectory as NSString).appendingPathComponent(path)
    }

    /// The -w text for a finished transfer.
    func writeOutText(_ report: WriteOutReport) throws -> String? {
        guard var format = writeOut else { return nil }
        if format.hasPrefix("@") {
            let path = String(format.dropFirst())
            let data = path == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: path)
            guard let data else { throw CLIFailure(message: "cannot read the -w format from \(path)", code: 26) }
            format = String(decoding: data, as: UTF8.self)
        }
        return report.expand(format)
    }
}

/// The values `-w` can print, from the task, its metrics and what the transfer counted.
struct WriteOutReport {
    var response: HTTPURLResponse?
    var effectiveURL: URL?
    var metrics: URLSessionTaskMetrics?
    var bytesDownloaded: Int64
    var redirects: Int
    var exitCode: Int32
    var errorMessage: String

    /// curl's escapes (`\n`, `\r`, `\t`, `\\`), `%%`, and `%{name}`; an unknown name is left
    /// as it is.
    func expand(_ format: String) -> String {
        var output = ""
        let characters = Array(format)
        var index = 0
        while index < characters.count {
            let character = characters[index]
            if character == "\\", index + 1 < characters.count {
                switch characters[index + 1] {
                case "n": output.append("\n")
                case "r": output.append("\r")
                case "t": output.append("\t")
                case "\\": output.append("\\")
                default: output.append(character); output.append(characters[index + 1])
                }
                index += 2
                continue
            }
            if character == "%", index + 1 < characters.count {
                if characters[index + 1] == "%" {
                    output.append("%")
                    index += 2
                    continue
                }
                if characters[index + 1] == "{", let close = characters[(index + 2)...].firstIndex(of: "}") {
                    let name = String(characters[(index + 2)..<close])
                    output += value(of: name) ?? "%{\(name)}"
                    index = close + 1
                    continue
                }
            }
            output.append(character)
            index += 1
        }
        return output
    }

    private func seconds(_ date: Date?) -> String {
        guard let date, let start = metrics?.taskInterval.start else { return "0.000000" }
        return String(format: "%.6f", max(0, date.timeIntervalSince(start)))
    }

    func value(of name: String) -> String? {
        let last = metrics?.transactionMetrics.last
        switch name {
        case "http_code", "response_code": return String(format: "%03d", response?.statusCode ?? 0)
        case "time_namelookup": return seconds(last?.domainLookupEndDate ?? last?.fetchStartDate)
        case "time_connect": return seconds(last?.secureConnectionStartDate ?? last?.connectEndDate ?? last?.fetchStartDate)
        case "time_appconnect": return last?.secureConnectionEndDate == nil ? "0.000000" : seconds(last?.secureConnectionEndDate)
        case "time_pretransfer": return seconds(last?.requestStartDate)
        case "time_starttransfer": return seconds(last?.responseStartDate)
        case "time_total":
            guard let interval = metrics?.taskInterval else { return "0.000000" }
            return String(format: "%.6f", interval.duration)
        case "size_download": return String(bytesDownloaded)
        case "speed_download":
            let total = metrics?.taskInterval.duration ?? 0
            return String(total > 0 ? Int64(Double(bytesDownloaded) / total) : 0)
        case "num_redirects": return String(redirects)
        case "num_connects":
            // New connections this transfer opened (a reused one counts none).
            let network = metrics?.transactionMetrics.filter { $0.resourceFetchType == .networkLoad } ?? []
            return String(network.filter { !$0.isReusedConnection }.count)
        case "url_effective": return effectiveURL?.absoluteString ?? ""
        case "http_version":
            switch last?.networkProtocolName {
            case "h2": return "2"
            case "http/1.0": return "1.0"
            case .some: return "1.1"
            case nil: return "0"
            }
        case "content_type": return response?.value(forHTTPHeaderField: "Content-Type") ?? ""
        case "remote_ip": return last?.remoteAddress ?? ""
        case "remote_port": return last?.remotePort.map(String.init) ?? ""
        case "local_port": return last?.localPort.map(String.init) ?? ""
        case "exitcode": return String(exitCode)
        case "errormsg": return errorMessage
        default: return nil
        }
    }
}

/// curl's exit code for a task's error (its `man curl` list): 6 resolve, 7 connect, 28
/// timeout, 35 TLS, 47 redirects, 52 empty reply, 56 receive, 60 certificate, …
func curlExitCode(for error: any Error, receivedResponse: Bool) -> Int32 {
    guard let urlError = error as? URLError else { return 1 }
    switch urlError.code {
    case .badURL: return 3
    case .unsupportedURL: return 1
    case .cannotFindHost, .dnsLookupFailed: return 6
    case .cannotConnectToHost: return 7
    case .timedOut: return 28
    case .secureConnectionFailed, .clientCertificateRejected, .clientCertificateRequired: return 35
    case .serverCertificateUntrusted, .serverCertificateHasBadDate, .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot: return 60
    case .httpTooManyRedirects, .redirectToNonExistentLocation: return 47
    case .networkConnectionLost: return receivedResponse ? 18 : 52
    case .badServerResponse, .cannotParseResponse: return 8
    case .cannotDecodeContentData, .cannotDecodeRawData: return 61
    case .dataLengthExceedsMaximum: return 63
    // A proxy that refused the tunnel (407) or its SOCKS5 credentials: curl says 56.
    case .userAuthenticationRequired: return 56
    case .cannotWriteToFile, .cannotCreateFile: return 23
    case .cannotOpenFile, .fileDoesNotExist, .noPermissionsToReadFile: return 37
    default: return 1
    }
}
