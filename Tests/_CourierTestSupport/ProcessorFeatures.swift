import Foundation

/// What the processor offers, read from /proc/cpuinfo: the kernel's view, independent of the
/// code under test.
public enum ProcessorFeatures {
    /// True when /proc/cpuinfo lists AES instructions and carry-less multiplication: `aes` and
    /// `pclmulqdq` among x86's flags, `aes` and `pmull` among ARM's features.
    public static var hasAESInstructions: Bool {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return false }
        for line in text.split(separator: "\n") where line.hasPrefix("flags") || line.hasPrefix("Features") {
            let words = Set(line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == ":" }).map(String.init))
            return words.contains("aes") && (words.contains("pclmulqdq") || words.contains("pmull"))
        }
        return false
    }
}
