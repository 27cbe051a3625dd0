import Foundation

/// curl's progress meter on standard error: a two-line heading, then one line redrawn at most
/// four times a second (sizes, percentages, average speeds, times, current speed), ended by a
/// newline. Shown unless -s, or when the body goes to a terminal.
final class ProgressMeter: @unchecked Sendable {
    /// curl's two looks: the table (the default) and `-#`'s bar.
    enum Style { case table, bar }

    private let style: Style
    /// The bar's width in characters: the terminal's (COLUMNS) less room for the percentage.
    private let barWidth: Int
    private let lock = NSLock()
    private let start = Date()
    private var expectedDownload: Int64 = 0
    private var downloaded: Int64 = 0
    private var expectedUpload: Int64 = 0
    private var uploaded: Int64 = 0
    private var lastDraw = Date.distantPast
    /// Bytes and time at the last draw, for the current speed.
    private var lastDownloaded: Int64 = 0
    private var currentSpeed: Double = 0
    private var finished = false

    init(style: Style = .table) {
        self.style = style
        let columns = Int(ProcessInfo.processInfo.environment["COLUMNS"] ?? "") ?? 80
        barWidth = max(10, min(columns, 400) - 8)
        if style == .table {
            write("  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n"
                + "                                 Dload  Upload   Total   Spent    Left  Speed\n")
        }
    }

    func downloading(received: Int64, expected: Int64) {
        update {
            downloaded = received
            if expected > 0 { expectedDownload = expected }
        }
    }

    func uploading(sent: Int64, expected: Int64) {
        update {
            uploaded = sent
            if expected > 0 { expectedUpload = expected }
        }
    }

    /// The last line, complete, and the newline after it.
    func finish() {
        lock.lock()
        defer { lock.unlock() }
        guard !finished else { return }
        finished = true
        write("\r" + line(now: Date()) + "\n")
    }

    private func update(_ change: () -> Void) {
        lock.lock()
        defer { lock.unlock() }
        guard !finished else { return }
        change()
        let now = Date()
        let interval = now.timeIntervalSince(lastDraw)
        guard interval >= 0.25 else { return }
        if lastDraw != .distantPast { currentSpeed = Double(downloaded - lastDownloaded) / interval }
        lastDraw = now
        lastDownloaded = downloaded
        write("\r" + line(now: now))
    }

    private func line(now: Date) -> String {
        style == .bar ? bar() : table(now: now)
    }

    /// `-#`: hashes across the terminal and the share done; with no known size, a run of hashes
    /// that grows and wraps.
    private func bar() -> String {
        let total = expectedDownload + expectedUpload
        let done = downloaded + uploaded
        guard total > 0 else {
            let shown = finished ? barWidth : Int((Date().timeIntervalSince(start) * 8).truncatingRemainder(dividingBy: Double(barWidth)))
            return String(repeating: "#", count: shown).padding(toLength: barWidth, withPad: " ", startingAt: 0)
        }
        let fraction = min(1, Double(done) / Double(total))
        let hashes = String(repeating: "#", count: Int(fraction * Double(barWidth)))
        return hashes.padding(toLength: barWidth, withPad: " ", startingAt: 0) + String(format: " %5.1f%%", fraction * 100)
    }

    private func table(now: Date) -> String {
        let spent = now.timeIntervalSince(start)
        let averageDownload = spent > 0 ? Double(downloaded) / spent : 0
        let averageUpload = spent > 0 ? Double(uploaded) / spent : 0
        let total = expectedDownload + expectedUpload
        let done = downloaded + uploaded
        func percent(_ part: Int64, _ whole: Int64) -> String { whole > 0 ? String(min(100, part * 100 / whole)) : "0" }
        var left: Double?
        var whole: Double?
        if total > 0, averageDownload + averageUpload > 0 {
            whole = Double(total) / (averageDownload + averageUpload)
            left = max(0, (whole ?? 0) - spent)
        }
        // curl's columns: "100 1024k  100 1024k    0     0  50.1M      0 --:--:-- 0:00:01 --:--:-- 50.0M".
        return pad(percent(done, total), 3) + " " + pad(Self.size(max(total, done)), 5) + "  "
            + pad(percent(downloaded, expectedDownload), 3) + " " + pad(Self.size(downloaded), 5) + "  "
            + pad(percent(uploaded, expectedUpload), 3) + " " + pad(Self.size(uploaded), 5) + "  "
            + pad(Self.size(Int64(averageDownload)), 5) + " " + pad(Self.size(Int64(averageUpload)), 6) + " "
            + Self.time(whole) + " " + Self.time(spent) + " " + Self.time(left) + " "
            + pad(Self.size(Int64(finished ? averageDownload : currentSpeed)), 5)
    }

    private func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }

    /// curl's compact sizes: bytes up to 99999, then k, M, G with at most five characters.
    static func size(_ bytes: Int64) -> String {
        if bytes < 100_000 { return String(bytes) }
        let units: [(String, Double)] = [("k", 1024), ("M", 1024 * 1024), ("G", 1024 * 1024 * 1024)]
        for (unit, scale) in units {
            let value = Double(bytes) / scale
            if value < 10 { return String(format: "%.1f", value) + unit }
            if value < 10_000 { return String(Int64(value)) + unit }
        }
        return String(Int64(Double(bytes) / (1024 * 1024 * 1024 * 1024))) + "T"
    }

    /// `HH:MM:SS`, or curl's `--:--:--` when unknown.
    static func time(_ seconds: Double?) -> String {
        guard let seconds, seconds.isFinite, seconds >= 0 else { return "--:--:--" }
        let whole = Int(seconds)
        return String(format: "%02d:%02d:%02d", min(whole / 3600, 99), whole / 60 % 60, whole % 60)
    }

    private func write(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }
}
