/// `courier --help`, laid out as curl lays out its own: a usage line, then one option per line
/// with a short summary. `-h` alone shows the options most runs need; `--help CATEGORY` one
/// category; `--help category` the categories; `--help all` every option. The full text of each
/// option (ArgumentParser's help) is `courier --manual`.
enum HelpCatalog {
    struct Entry {
        var short: Character? = nil
        var long: String
        var value: String? = nil
        var summary: String
        var categories: Set<String>
    }

    static let categories: [(name: String, summary: String)] = [
        ("auth", "Logging in to servers and proxies"),
        ("connection", "How connections are made and how long they may take"),
        ("curl", "The command itself: config files, retries, several URLs"),
        ("http", "HTTP requests and responses"),
        ("important", "The options most runs need"),
        ("output", "Where the body and the files go"),
        ("post", "Bodies for POST and other methods"),
        ("proxy", "HTTP and SOCKS5 proxies"),
        ("tls", "TLS: certificates and versions"),
        ("upload", "Sending files and forms"),
        ("verbose", "What courier prints about a transfer"),
        ("websocket", "WebSocket sessions"),
    ]

    static let entries: [Entry] = [
        Entry(short: "A", long: "user-agent", value: "<name>", summary: "Send this User-Agent", categories: ["important", "http"]),
        Entry(long: "anyauth", summary: "Answer the strongest scheme the server offers", categories: ["auth", "http"]),
        Entry(short: "b", long: "cookie", value: "<data|file>", summary: "Send these cookies, or start from a cookie file", categories: ["http"]),
        Entry(long: "basic", summary: "Send Basic credentials with the first request", categories: ["auth"]),
        Entry(short: "c", long: "cookie-jar", value: "<file>", summary: "Save every cookie to this file at the end", categories: ["http"]),
        Entry(long: "cacert", value: "<file>", summary: "Trust the CA certificates in this PEM file", categories: ["tls"]),
        Entry(short: "E", long: "cert", value: "<file[:pass]>", summary: "Client certificate (PEM), with its passphrase", categories: ["tls", "auth"]),
        Entry(long: "compressed", summary: "Ask for gzip, deflate or br and decode it", categories: ["http"]),
        Entry(short: "K", long: "config", value: "<file>", summary: "Read more options from this file", categories: ["curl"]),
        Entry(long: "connect-timeout", value: "<seconds>", summary: "Longest time to wait for a connection", categories: ["connection"]),
        Entry(short: "C", long: "continue-at", value: "-", summary: "Resume into the existing output file", categories: ["connection", "output"]),
        Entry(long: "create-dirs", summary: "Create missing directories of output files", categories: ["output"]),
        Entry(short: "d", long: "data", value: "<data>", summary: "Send this body (a POST); @file, @- read it", categories: ["important", "http", "post", "upload"]),
        Entry(long: "data-binary", value: "<data>", summary: "Send this body, @file byte for byte", categories: ["http", "post", "upload"]),
        Entry(long: "data-raw", value: "<data>", summary: "Send this body, @ meaning nothing", categories: ["http", "post", "upload"]),
        Entry(long: "data-urlencode", value: "<data>", summary: "Send this body percent-encoded", categories: ["http", "post", "upload"]),
        Entry(long: "digest", summary: "Answer a Digest challenge", categories: ["auth", "http"]),
        Entry(short: "D", long: "dump-header", value: "<file>", summary: "Write the response heads to this file", categories: ["http", "output"]),
        Entry(short: "f", long: "fail", summary: "Exit 22 on HTTP errors, writing no body", categories: ["important", "http"]),
        Entry(long: "fail-with-body", summary: "Exit 22 on HTTP errors, writing the body", categories: ["http", "output"]),
        Entry(short: "F", long: "form", value: "<name=content>", summary: "Add a multipart/form-data part", categories: ["http", "upload", "post"]),
        Entry(long: "form-string", value: "<name=text>", summary: "Add a multipart part, text taken as is", categories: ["http", "upload", "post"]),
        Entry(short: "G", long: "get", summary: "Put the -d data in the query of a GET", categories: ["http"]),
        Entry(short: "I", long: "head", summary: "Ask with HEAD and show the head only", categories: ["http"]),
        Entry(short: "H", long: "header", value: "<header>", summary: "Add, replace (Name:) or empty (Name;) a field", categories: ["important", "http"]),
        Entry(short: "h", long: "help", value: "<category>", summary: "Show help for a category, or all", categories: ["important", "curl"]),
        Entry(long: "http1.1", summary: "Speak HTTP/1.1 only", categories: ["http"]),
        Entry(long: "http2", summary: "Speak HTTP/2 where TLS offers it (the default)", categories: ["http"]),
        Entry(long: "http2-prior-knowledge", summary: "Speak HTTP/2 from the first byte", categories: ["http"]),
        Entry(short: "i", long: "include", summary: "Print the response head before the body", categories: ["important", "verbose"]),
        Entry(short: "k", long: "insecure", summary: "Accept any server certificate", categories: ["tls"]),
        Entry(long: "json", value: "<data>", summary: "Send this JSON body, as application/json", categories: ["http", "post", "upload"]),
        Entry(short: "j", long: "junk-session-cookies", summary: "Drop the session cookies of a -b file", categories: ["http"]),
        Entry(long: "key", value: "<file>", summary: "Private key of --cert (PEM)", categories: ["tls"]),
        Entry(short: "L", long: "location", summary: "Follow redirects", categories: ["important", "http"]),
        Entry(long: "manual", summary: "Show every option with its full description", categories: ["curl"]),
        Entry(long: "max-redirs", value: "<num>", summary: "Follow at most this many redirects", categories: ["http"]),
        Entry(short: "m", long: "max-time", value: "<seconds>", summary: "Longest time the whole transfer may take", categories: ["connection"]),
        Entry(long: "noproxy", value: "<hosts>", summary: "Hosts reached without the proxy", categories: ["proxy"]),
        Entry(short: "o", long: "output", value: "<file>", summary: "Write the body to a file, not stdout", categories: ["important", "output"]),
        Entry(long: "output-dir", value: "<dir>", summary: "Put the output files in this directory", categories: ["output"]),
        Entry(short: "Z", long: "parallel", summary: "Run the transfers at the same time", categories: ["connection", "curl"]),
        Entry(long: "parallel-max", value: "<num>", summary: "With -Z, at most this many at once", categories: ["connection", "curl"]),
        Entry(long: "pass", value: "<phrase>", summary: "Passphrase of --key", categories: ["tls", "auth"]),
        Entry(short: "#", long: "progress-bar", summary: "Show progress as a bar", categories: ["verbose"]),
        Entry(short: "x", long: "proxy", value: "<[scheme://]host[:port]>", summary: "Go through this proxy", categories: ["proxy"]),
        Entry(long: "proxy-user", value: "<user:password>", summary: "Credentials for the proxy", categories: ["proxy", "auth"]),
        Entry(short: "r", long: "range", value: "<range>", summary: "Ask for these bytes only", categories: ["http"]),
        Entry(short: "e", long: "referer", value: "<URL>", summary: "Send this Referer", categories: ["http"]),
        Entry(short: "J", long: "remote-header-name", summary: "With -O, take the name Content-Disposition gives", categories: ["output"]),
        Entry(short: "O", long: "remote-name", summary: "Write the body to a file named after the URL", categories: ["important", "output"]),
        Entry(short: "X", long: "request", value: "<method>", summary: "Use this method", categories: ["connection", "http"]),
        Entry(long: "retry", value: "<num>", summary: "Try transient failures again this many times", categories: ["curl"]),
        Entry(long: "retry-all-errors", summary: "With --retry, try again after any failure", categories: ["curl"]),
        Entry(long: "retry-connrefused", summary: "With --retry, also after a refused connection", categories: ["curl"]),
        Entry(long: "retry-delay", value: "<seconds>", summary: "Wait this long between tries", categories: ["curl"]),
        Entry(long: "retry-max-time", value: "<seconds>", summary: "Start no try after this long", categories: ["curl"]),
        Entry(short: "S", long: "show-error", summary: "With -s, still print errors", categories: ["curl", "verbose"]),
        Entry(short: "s", long: "silent", summary: "Print no progress and no errors", categories: ["important", "verbose"]),
        Entry(long: "socks5", value: "<host[:port]>", summary: "Go through this SOCKS5 proxy, resolving here", categories: ["proxy"]),
        Entry(long: "socks5-hostname", value: "<host[:port]>", summary: "Go through this SOCKS5 proxy, which resolves", categories: ["proxy"]),
        Entry(long: "tlsv1.2", summary: "Use TLS 1.2 or later (the default)", categories: ["tls"]),
        Entry(long: "tlsv1.3", summary: "Use TLS 1.3 or later", categories: ["tls"]),
        Entry(long: "trace", value: "<file>", summary: "Write everything sent and received, in hex, to a file", categories: ["verbose"]),
        Entry(long: "trace-ascii", value: "<file>", summary: "Write everything sent and received, as text, to a file", categories: ["verbose"]),
        Entry(short: "T", long: "upload-file", value: "<file>", summary: "PUT this file to the URL", categories: ["important", "upload"]),
        Entry(long: "url", value: "<url>", summary: "A URL to fetch", categories: ["curl"]),
        Entry(short: "u", long: "user", value: "<user:password>", summary: "Credentials for the server", categories: ["important", "auth"]),
        Entry(short: "v", long: "verbose", summary: "Print the request and response heads", categories: ["important", "verbose"]),
        Entry(short: "V", long: "version", summary: "Show the version and the features built in", categories: ["important", "curl"]),
        Entry(short: "w", long: "write-out", value: "<format>", summary: "Print this, with %{variables}, after the transfer", categories: ["verbose", "output"]),
        Entry(long: "ws", summary: "WebSocket: send stdin's lines, print what arrives", categories: ["websocket"]),
    ]

    static let usage = "Usage: courier [options...] <url>"

    /// The help for `topic`: nil for the everyday options, "category" for the list of
    /// categories, "all", or a category's name. Nil when the topic is unknown.
    static func text(for topic: String?) -> String? {
        var lines = [usage]
        switch topic {
        case nil:
            lines += rows(entries.filter { $0.categories.contains("important") })
            lines += [
                "",
                "This shows the options most runs need; there are more, in categories.",
                "\"--help category\" lists the categories, \"--help all\" shows every option,",
                "\"--manual\" describes each one in full.",
            ]
        case "category"?:
            let width = categories.map(\.name.count).max() ?? 0
            lines += categories.map { " " + $0.name.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $0.summary }
        case "all"?:
            lines += rows(entries)
        case let name?:
            guard let category = categories.first(where: { $0.name == name }) else { return nil }
            lines = ["\(category.name): \(category.summary)"] + rows(entries.filter { $0.categories.contains(name) })
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// One line per option: ` -d, --data <data>  Summary`, the summaries in one column.
    private static func rows(_ entries: [Entry]) -> [String] {
        let heads = entries.map { entry in
            (entry.short.map { " -\($0), " } ?? "     ") + "--\(entry.long)" + (entry.value.map { " \($0)" } ?? "")
        }
        let width = min(36, heads.map(\.count).max() ?? 0)
        return zip(heads, entries).map { head, entry in
            head.count >= width ? head + " " + entry.summary : head.padding(toLength: width + 1, withPad: " ", startingAt: 0) + entry.summary
        }
    }
}
