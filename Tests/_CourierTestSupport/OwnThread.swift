import Foundation

/// Runs `work`, which blocks (waits for a child process, reads a pipe to its end), on a thread
/// of its own, and suspends until it is done.
///
/// Tests run on Swift's cooperative pool, which has one thread per core: two on CI's machine.
/// A test that blocks one of them in `waitUntilExit` or `readDataToEndOfFile` halves the pool
/// for every other test, and two such tests at once stop them all (timers, continuations and
/// servers' callbacks wait until a child process has exited). Blocking work goes here instead.
public func onOwnThread<T: Sendable, Failure: Error>(
    _ work: @escaping @Sendable () throws(Failure) -> T
) async throws(Failure) -> T {
    let result: Result<T, Failure> = await withCheckedContinuation { continuation in
        let thread = Thread { continuation.resume(returning: Result { () throws(Failure) -> T in try work() }) }
        thread.name = "test-blocking-work"
        thread.start()
    }
    return try result.get()
}
