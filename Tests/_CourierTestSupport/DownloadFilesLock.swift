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

/// Runs a test holding ``DownloadFilesLock``.
public struct ExclusiveDownloadFiles: TestTrait, TestScoping {
    public init() {}

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await DownloadFilesLock.holding { try await function() }
    }
}

extension Trait where Self == ExclusiveDownloadFiles {
    /// The test looks at which download files exist: no other test's download runs meanwhile.
    public static var exclusiveDownloadFiles: Self { Self() }
}
