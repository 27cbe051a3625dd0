import Testing

/// Download tasks make their files in the one temporary directory, and some download tests check
/// which files exist there before and after. Those tests hold this lock for their whole run
/// (``Trait/exclusiveDownloadFiles``), and every other download made by the tests holds it
/// while it runs, so no other test's file comes or goes under their feet. Nested holds in one
/// task are allowed.
public actor DownloadFilesLock {
    public static let shared = DownloadFilesLock()

    /// True inside a task that holds the lock.
    @TaskLocal public static var isHeld = false

    private var held = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    private func acquire() async {
        guard held else {
            held = true
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    /// Hands the lock to the first waiter, or frees it.
    private func release() {
        if waiters.isEmpty {
            held = false
        } else {
            waiters.removeFirst().resume()
        }
    }

    /// Runs `body` holding the lock.
    public static func holding<T>(_ body: () async throws -> T) async throws -> T {
        if isHeld { return try await body() }
        await shared.acquire()
        do {
            let value = try await $isHeld.withValue(true) { try await body() }
            await shared.release()
            return value
        } catch {
            await shared.release()
            throw error
        }
    }
}

/// Runs a test holding ``DownloadFilesLock``, and with `timeLimit`, gives its body that long
/// from the moment it has the lock.
///
/// A suite's `.timeLimit` counts the wait for the lock too, and the wait is as long as other
/// tests' downloads (seconds each, more under a sanitizer), so a test that holds the lock takes
/// its limit from here instead, in a suite without one.
public struct ExclusiveDownloadFiles: TestTrait, TestScoping {
    public let timeLimit: Duration?

    public init(timeLimit: Duration? = nil) {
        self.timeLimit = timeLimit
    }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await DownloadFilesLock.holding {
            guard let timeLimit else { return try await function() }
            // The group awaits both children before it returns, so the body does not outlive
            // this call.
            try await withoutActuallyEscaping(function) { function in
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    group.addTask {
                        try await function()
                        return true
                    }
                    group.addTask {
                        // Cancelled when the body ends first; a cancelled sleep throws, which
                        // the group discards.
                        try await Task.sleep(for: timeLimit)
                        return false
                    }
                    // The first child to end decides; the other is cancelled and awaited.
                    defer { group.cancelAll() }
                    if let finished = try await group.next(), !finished {
                        Issue.record("Time limit was exceeded: \(timeLimit) after the download-files lock was taken")
                    }
                }
            }
        }
    }
}

extension Trait where Self == ExclusiveDownloadFiles {
    /// The test looks at which download files exist: no other test's download runs meanwhile.
    public static var exclusiveDownloadFiles: Self { Self() }

    /// As ``exclusiveDownloadFiles``, and the test's body gets `timeLimit` once it has the lock
    /// (for a test in a suite without `.timeLimit`; a suite's limit would count the wait).
    public static func exclusiveDownloadFiles(timeLimit: Duration) -> Self { Self(timeLimit: timeLimit) }
}
