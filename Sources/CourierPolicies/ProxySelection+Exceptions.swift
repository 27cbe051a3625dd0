import Foundation

/// Hosts whose requests bypass every proxy and connect directly.
///
/// Built from curl's `no_proxy` list (``noProxy(_:)``) or Apple's `ExceptionsList`
/// (``exceptionsList(_:excludeSimpleHostnames:)``). Matching never resolves a name: an entry
/// written as an address or a CIDR range matches only a URL whose host is an address literal
/// of the same family (an IPv4-mapped IPv6 host does not match an IPv4 entry), and a name
/// entry never matches an address literal. Entries that cannot be parsed are left out, as
/// curl leaves them out.
public struct ProxyExceptions: Sendable, Equatable {
    /// One exception.
    enum Entry: Sendable, Equatable {
        /// Every host.
        case everyHost
        /// Host names without a dot that are not address literals (Apple's `<local>` and
        /// `ExcludeSimpleHostnames`).
        case simpleHostNames
        /// A domain name, lower-cased, without its leading and trailing dots; the port, when
        /// given, restricts the entry to URLs with that port.
        case name(String, NameScope, port: UInt16?)
        /// An address range: the network's bytes (4 or 16, with the bits past the prefix
        /// cleared) and the prefix length in bits.
        case addresses([UInt8], prefixLength: Int, port: UInt16?)
        /// An Apple pattern with `*` inside, matched against the whole host text, where `*`
        /// stands for any run of characters (`192.168.*`, `*.example.*`).
        case wildcard(String, port: UInt16?)
    }

    /// Which hosts a name entry covers.
    enum NameScope: Sendable, Equatable {
        /// The name itself and every name under it (`example.com` and `a.example.com`).
        case nameAndSubdomains
        /// Only names under it (Apple's `*.example.com` and `.example.com`).
        case subdomainsOnly
    }

    /// Whose syntax a list is written in.
    enum Dialect: Sendable, Equatable {
        /// curl's `no_proxy`.
        case curl
        /// Apple's `kCFNetworkProxiesExceptionsList`.
        case apple
    }

    /// The entries, in the order written, without the ones that could not be parsed.
    var entries: [Entry]

    /// Exceptions made of these entries.
    init(entries: [Entry]) {
        self.entries = entries
    }

    /// No exceptions: every request goes through the proxy its scheme names.
    public static let none = ProxyExceptions(entries: [])

    /// curl's `no_proxy` list (curl 7.86 and later), with ports.
    ///
    /// Entries are separated by commas or white space and compared without regard to case.
    /// - `*` (as the whole list or as any entry) makes every host bypass the proxy.
    /// - An IPv4 or IPv6 address, with an optional `/prefix`, matches address literals in that
    ///   range; an IPv6 address may be written in brackets. A prefix longer than the address
    ///   drops the entry.
    /// - Any other entry is a domain name. One leading `.` or `*.` and one trailing `.` are
    ///   dropped; the name matches itself and every name under it, at label boundaries:
    ///   `example.com` matches `a.example.com` but not `badexample.com`.
    /// - A name, an IPv4 address or a bracketed IPv6 address may end in `:port` to cover only
    ///   URLs with that port (`localhost:8080`, `[::1]:443`). An IPv6 address without brackets
    ///   never has a port.
    public static func noProxy(_ list: String) -> ProxyExceptions {
        let items = list.split { $0 == "," || $0.isWhitespace }
        return ProxyExceptions(entries: items.compactMap { entry(String($0), dialect: .curl) })
    }

    /// Apple's `ExceptionsList` patterns (`kCFNetworkProxiesExceptionsList`) and its
    /// `ExcludeSimpleHostnames` flag.
    ///
    /// - `*` makes every host bypass the proxy.
    /// - `*.example.com` and `.example.com` match names under `example.com`, not
    ///   `example.com` itself; a plain `example.com` matches itself and the names under it.
    /// - Another pattern with `*` in it matches the host text as a whole, `*` standing for any
    ///   run of characters (`192.168.*`).
    /// - Addresses and CIDR ranges work as in ``noProxy(_:)``; a range may also leave out its
    ///   trailing zero octets (`169.254/16` is `169.254.0.0/16`).
    /// - `<local>`, and `excludeSimpleHostnames`, make host names without a dot bypass the
    ///   proxy (address literals excepted).
    public static func exceptionsList(_ patterns: [String], excludeSimpleHostnames: Bool) -> ProxyExceptions {
        var entries = patterns.compactMap { entry($0.trimmingCharacters(in: .whitespacesAndNewlines), dialect: .apple) }
        if excludeSimpleHostnames { entries.append(.simpleHostNames) }
        return ProxyExceptions(entries: entries)
    }

    /// True when a request to `host:port` connects directly. The host is compared without
    /// regard to case and without its trailing dot; an IPv6 literal may come with or without
    /// brackets.
    public func bypasses(host: String, port: UInt16) -> Bool {
        guard !entries.isEmpty else { return false }
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]"), name.utf8.count >= 2 { name = String(name.dropFirst().dropLast()) }
        if name.utf8.count > 1, name.hasSuffix(".") { name.removeLast() }
        let bytes = Array(name.utf8)
        let address = IPAddressLiteral.ipv4(bytes[...]) ?? IPAddressLiteral.ipv6(bytes[...])
        return entries.contains { $0.matches(host: bytes, address: address, port: port) }
    }

    // MARK: - Parsing entries

    /// One entry of either syntax, or nil when it cannot be parsed.
    static func entry(_ raw: String, dialect: Dialect) -> Entry? {
        let text = raw.lowercased()
        if text == "*" { return .everyHost }
        if dialect == .apple, text == "<local>" { return .simpleHostNames }
        var bytes = Array(text.utf8)[...]
        guard !bytes.isEmpty else { return nil }
        if bytes.first == ProxyASCII.openBracket { return bracketedEntry(bytes) }

        // A single colon separates a port; two or more make an IPv6 address, which has none.
        var port: UInt16?
        if bytes.lazy.filter({ $0 == ProxyASCII.colon }).count == 1, let colon = bytes.firstIndex(of: ProxyASCII.colon) {
            guard let number = ProxySelection.parsePort(bytes[bytes.index(after: colon)...]) else { return nil }
            port = number
            bytes = bytes[..<colon]
        }
        if let slash = bytes.firstIndex(of: ProxyASCII.slash) {
            let addressText = bytes[..<slash]
            var address = IPAddressLiteral.ipv4(addressText) ?? IPAddressLiteral.ipv6(addressText)
            if address == nil, dialect == .apple { address = IPAddressLiteral.shortenedIPv4(addressText) }
            guard let address else { return nil }
            return addressEntry(address, prefixText: bytes[bytes.index(after: slash)...], port: port)
        }
        if let address = IPAddressLiteral.ipv4(bytes) ?? IPAddressLiteral.ipv6(bytes) {
            return .addresses(address, prefixLength: address.count * 8, port: port)
        }
        return nameEntry(bytes, dialect: dialect, port: port)
    }

    /// `[v6]`, `[v6]:port`, `[v6/prefix]` or `[v6]/prefix`, each with an optional `:port`.
    private static func bracketedEntry(_ bytes: ArraySlice<UInt8>) -> Entry? {
        guard let close = bytes.firstIndex(of: ProxyASCII.closeBracket) else { return nil }
        var inside = bytes[bytes.index(after: bytes.startIndex)..<close]
        var rest = bytes[bytes.index(after: close)...]
        var prefixText: ArraySlice<UInt8>?
        if let slash = inside.firstIndex(of: ProxyASCII.slash) {
            prefixText = inside[inside.index(after: slash)...]
            inside = inside[..<slash]
        }
        if rest.first == ProxyASCII.slash {
            guard prefixText == nil else { return nil }
            let end = rest.firstIndex(of: ProxyASCII.colon) ?? rest.endIndex
            prefixText = rest[rest.index(after: rest.startIndex)..<end]
            rest = rest[end...]
        }
        var port: UInt16?
        if !rest.isEmpty {
            guard rest.first == ProxyASCII.colon, let number = ProxySelection.parsePort(rest.dropFirst()) else { return nil }
            port = number
        }
        guard let address = IPAddressLiteral.ipv6(inside) else { return nil }
        guard let prefixText else { return .addresses(address, prefixLength: 128, port: port) }
        return addressEntry(address, prefixText: prefixText, port: port)
    }

    /// A range entry, or nil when the prefix is not a number of bits within the address.
    private static func addressEntry(_ address: [UInt8], prefixText: ArraySlice<UInt8>, port: UInt16?) -> Entry? {
        guard (1...3).contains(prefixText.count), prefixText.allSatisfy(ProxyASCII.isDigit) else { return nil }
        let length = prefixText.reduce(0) { $0 * 10 + Int($1 - ProxyASCII.zero) }
        guard length <= address.count * 8 else { return nil }
        return .addresses(IPAddressLiteral.masked(address, prefixLength: length), prefixLength: length, port: port)
    }

    /// A name entry, or an Apple wildcard pattern.
    private static func nameEntry(_ bytes: ArraySlice<UInt8>, dialect: Dialect, port: UInt16?) -> Entry? {
        var pattern = bytes
        if pattern.count > 1, pattern.last == ProxyASCII.dot { pattern = pattern.dropLast() }
        var name = pattern
        var scope = NameScope.nameAndSubdomains
        if name.starts(with: [ProxyASCII.star, ProxyASCII.dot]) {
            name = name.dropFirst(2)
            if dialect == .apple { scope = .subdomainsOnly }
        } else if name.first == ProxyASCII.dot {
            name = name.dropFirst()
            if dialect == .apple { scope = .subdomainsOnly }
        }
        if dialect == .apple, pattern.contains(ProxyASCII.star), name.contains(ProxyASCII.star) {
            return .wildcard(String(decoding: pattern, as: UTF8.self), port: port)
        }
        guard !name.isEmpty, name.last != ProxyASCII.dot else { return nil }
        return .name(String(decoding: name, as: UTF8.self), scope, port: port)
    }
}

extension ProxyExceptions.Entry {
    /// True when the entry covers a host (lower-cased, bytes, without trailing dot), whose
    /// address is given when the host is an address literal.
    func matches(host: [UInt8], address: [UInt8]?, port: UInt16) -> Bool {
        switch self {
        case .everyHost:
            return true
        case .simpleHostNames:
            return address == nil && !host.isEmpty && !host.contains(ProxyASCII.dot)
        case .name(let name, let scope, let entryPort):
            guard entryPort == nil || entryPort == port, address == nil else { return false }
            let suffix = Array(name.utf8)
            if host == suffix { return scope == .nameAndSubdomains }
            return host.count > suffix.count && host.suffix(suffix.count).elementsEqual(suffix)
                && host[host.count - suffix.count - 1] == ProxyASCII.dot
        case .addresses(let network, let prefixLength, let entryPort):
            guard entryPort == nil || entryPort == port, let address, address.count == network.count else { return false }
            return IPAddressLiteral.masked(address, prefixLength: prefixLength) == network
        case .wildcard(let pattern, let entryPort):
            guard entryPort == nil || entryPort == port else { return false }
            return Self.glob(Array(pattern.utf8), matches: host)
        }
    }

    /// Glob matching where `*` stands for any run of bytes, by the usual two-pointer walk that
    /// returns to the last `*` on a mismatch (linear in practice, never exponential).
    static func glob(_ pattern: [UInt8], matches text: [UInt8]) -> Bool {
        var p = 0
        var t = 0
        var lastStar = -1
        var resumeAt = 0
        while t < text.count {
            if p < pattern.count, pattern[p] == ProxyASCII.star {
                lastStar = p
                resumeAt = t
                p += 1
            } else if p < pattern.count, pattern[p] == text[t] {
                p += 1
                t += 1
            } else if lastStar >= 0 {
                p = lastStar + 1
                resumeAt += 1
                t = resumeAt
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == ProxyASCII.star { p += 1 }
        return p == pattern.count
    }
}

/// The ASCII bytes and classes the proxy parsers look for.
enum ProxyASCII {
    static let dot = UInt8(ascii: ".")
    static let colon = UInt8(ascii: ":")
    static let slash = UInt8(ascii: "/")
    static let star = UInt8(ascii: "*")
    static let zero = UInt8(ascii: "0")
    static let openBracket = UInt8(ascii: "[")
    static let closeBracket = UInt8(ascii: "]")

    /// True for `A`–`Z` and `a`–`z`.
    static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    /// True for `0`–`9`.
    static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}

/// Text forms of IP addresses, parsed by hand (no `inet_pton`, so no C import in a pure
/// target) into network-order bytes: 4 for IPv4, 16 for IPv6.
enum IPAddressLiteral {
    /// The longest IPv6 text form: eight groups with an embedded IPv4 address,
    /// `ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`.
    static let maxIPv6TextBytes = 45

    /// A dotted-quad IPv4 address: four decimal octets. A leading zero is refused, as
    /// `inet_pton` refuses it, because other parsers read it as octal.
    static func ipv4(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        let parts = text.split(separator: ProxyASCII.dot, maxSplits: 4, omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        return octets(parts)
    }

    /// An IPv4 network written with its trailing zero octets left out (`169.254` for
    /// `169.254.0.0`), as Apple's exception lists allow before a `/prefix`.
    static func shortenedIPv4(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        let parts = text.split(separator: ProxyASCII.dot, maxSplits: 4, omittingEmptySubsequences: false)
        guard (1...4).contains(parts.count), var bytes = octets(parts) else { return nil }
        while bytes.count < 4 { bytes.append(0) }
        return bytes
    }

    /// The bytes of one to four decimal octets, or nil.
    private static func octets(_ parts: [ArraySlice<UInt8>]) -> [UInt8]? {
        var bytes: [UInt8] = []
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy(ProxyASCII.isDigit) else { return nil }
            guard part.count == 1 || part.first != ProxyASCII.zero else { return nil }
            let value = part.reduce(0) { $0 * 10 + Int($1 - ProxyASCII.zero) }
            guard value <= 255 else { return nil }
            bytes.append(UInt8(value))
        }
        return bytes
    }

    /// An IPv6 address (RFC 4291 section 2.2): eight groups of one to four hex digits, at
    /// most one `::` standing for one or more zero groups, and optionally a dotted-quad IPv4
    /// address as the last 32 bits. No zone identifier.
    static func ipv6(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        guard (2...maxIPv6TextBytes).contains(text.count) else { return nil }
        // 1. Find the one `::`, if any.
        var gap: Int?
        var index = text.startIndex
        while index < text.endIndex - 1 {
            if text[index] == ProxyASCII.colon, text[index + 1] == ProxyASCII.colon {
                guard gap == nil else { return nil }
                gap = index
                index += 2
            } else {
                index += 1
            }
        }
        // 2. Parse the groups on each side of it and fill the gap with zeros.
        let groups: [UInt16]
        if let gap {
            guard let head = hexGroups(text[text.startIndex..<gap], allowsIPv4Tail: false),
                  let tail = hexGroups(text[(gap + 2)...], allowsIPv4Tail: true),
                  head.count + tail.count <= 7
            else { return nil }
            groups = head + [UInt16](repeating: 0, count: 8 - head.count - tail.count) + tail
        } else {
            guard let all = hexGroups(text, allowsIPv4Tail: true), all.count == 8 else { return nil }
            groups = all
        }
        // 3. Write them out in network order.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        for group in groups {
            bytes.append(UInt8(group >> 8))
            bytes.append(UInt8(group & 0xFF))
        }
        return bytes
    }

    /// The 16-bit groups of colon-separated hex text (an embedded IPv4 address counts as
    /// two), or nil when a group is empty or not hex.
    private static func hexGroups(_ text: ArraySlice<UInt8>, allowsIPv4Tail: Bool) -> [UInt16]? {
        if text.isEmpty { return [] }
        let parts = text.split(separator: ProxyASCII.colon, omittingEmptySubsequences: false)
        var result: [UInt16] = []
        for (position, part) in parts.enumerated() {
            if allowsIPv4Tail, position == parts.count - 1, part.contains(ProxyASCII.dot) {
                guard let v4 = ipv4(part) else { return nil }
                result.append(UInt16(v4[0]) << 8 | UInt16(v4[1]))
                result.append(UInt16(v4[2]) << 8 | UInt16(v4[3]))
                continue
            }
            guard (1...4).contains(part.count) else { return nil }
            var value: UInt16 = 0
            for byte in part {
                guard let digit = hexValue(byte) else { return nil }
                value = value << 4 | UInt16(digit)
            }
            result.append(value)
        }
        return result
    }

    /// The value of one hex digit, or nil.
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// The address with every bit past the first `prefixLength` cleared.
    static func masked(_ address: [UInt8], prefixLength: Int) -> [UInt8] {
        var result = address
        for index in result.indices {
            let keptBits = min(max(prefixLength - index * 8, 0), 8)
            // A shift by 8 gives 0 for UInt8 (a "smart" shift), so all eight bits are kept.
            result[index] &= ~(UInt8(0xFF) >> keptBits)
        }
        return result
    }
}
