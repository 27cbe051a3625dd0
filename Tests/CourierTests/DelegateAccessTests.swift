@testable import Courier
import Foundation
import Testing

private final class SessionDelegate: NSObject, URLSessionDelegate {}
private final class TaskDelegate: NSObject, URLSessionTaskDelegate {}

/// The session's and a task's delegate, read without a lock when none was ever given.
@Suite("Reading the session's and a task's delegate")
struct DelegateAccessTests {
    /// A loopback URL; the tasks here are never resumed.
    private static let url = URL(string: "http://127.0.0.1:9/never")!

    @Test("a session made without a delegate has none; one made with a delegate has it")
    func sessionDelegate() {
        let plain = URLSession(configuration: .ephemeral)
        #expect(plain.delegate == nil)
        #expect(URLSession.shared.delegate == nil)
        let delegate = SessionDelegate()
        let session = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        #expect((session.delegate as AnyObject?) === delegate)
        session.invalidateAndCancel()
        plain.invalidateAndCancel()
    }

    @Test("a task's delegate is nil until set, then the last one set, nil again once cleared")
    func taskDelegate() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: Self.url)
        #expect(task.delegate == nil)
        let first = TaskDelegate(), second = TaskDelegate()
        task.delegate = first
        #expect((task.delegate as AnyObject?) === first)
        task.delegate = second
        #expect((task.delegate as AnyObject?) === second)
        task.delegate = nil
        #expect(task.delegate == nil)
        task.delegate = first
        #expect((task.delegate as AnyObject?) === first)
        #expect(session.dataTask(with: Self.url).delegate == nil, "another task's delegate is its own")
    }

    @Test("a data task's delegate goes to the download task that takes its place")
    func replacingTaskKeepsTheDelegate() {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let delegate = TaskDelegate()
        let withDelegate = session.dataTask(with: Self.url)
        withDelegate.delegate = delegate
        let download = URLSessionDownloadTask(session: session, identifier: 1_000, replacing: withDelegate)
        #expect((download.delegate as AnyObject?) === delegate)

        let without = session.dataTask(with: Self.url)
        let other = URLSessionDownloadTask(session: session, identifier: 1_001, replacing: without)
        #expect(other.delegate == nil)
        other.delegate = delegate
        #expect((other.delegate as AnyObject?) === delegate)
    }
}
