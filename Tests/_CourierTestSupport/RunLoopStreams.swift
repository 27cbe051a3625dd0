import CourierSync
import Foundation

/// A value carried across threads by a test that orders the accesses itself.
public struct Unchecked<Value>: @unchecked Sendable {
    public let value: Value
    public init(_ value: Value) { self.value = value }
}

/// A thread running its run loop until stopped.
public final class RunLoopThread: @unchecked Sendable {
    private let state = Mutex<(runLoop: Unchecked<RunLoop>?, threadID: UInt?, stopped: Bool)>((nil, nil, false))
    public var runLoop: RunLoop? { state.withLock { $0.runLoop }?.value }
    /// The thread's `pthread_self()`, once it runs.
    public var threadID: UInt? { state.withLock { $0.threadID } }

    public init() {}

    public func start() {
        Thread { self.main() }.start()
    }

    private func main() {
        // A timer keeps the run loop with something to wait for, so `run(mode:before:)` waits.
        let keepAlive = Timer(timeInterval: 3600, repeats: true) { _ in }
        RunLoop.current.add(keepAlive, forMode: .default)
        state.withLock {
            $0.runLoop = Unchecked(RunLoop.current)
            $0.threadID = UInt(pthread_self())
        }
        while !state.withLock({ $0.stopped }) {
            _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.05))
        }
        keepAlive.invalidate()
    }

    /// Runs `job` on the run loop's thread.
    public func perform(_ job: @escaping @Sendable () -> Void) {
        guard let runLoop = state.withLock({ $0.runLoop })?.value else { return }
        runLoop.add(Timer(timeInterval: 0, repeats: false) { _ in job() }, forMode: .default)
    }

    public func stop() { state.withLock { $0.stopped = true } }
}

/// Writes `payload` into the output stream each time it has room, then closes it.
public final class RunLoopWriter: NSObject, StreamDelegate, @unchecked Sendable {
    private let payload: [UInt8]
    private var offset = 0
    private let record = Mutex<(events: [UInt], threads: Set<UInt>)>(([], []))
    public var events: [Stream.Event] { record.withLock { $0.events }.map { Stream.Event(rawValue: $0) } }
    /// The threads the delegate was called on.
    public var threads: Set<UInt> { record.withLock { $0.threads } }

    public init(payload: [UInt8]) {
        self.payload = payload
    }

    public func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        record.withLock {
            $0.events.append(eventCode.rawValue)
            $0.threads.insert(UInt(pthread_self()))
        }
        guard eventCode == .hasSpaceAvailable, let output = aStream as? OutputStream else { return }
        let count = payload[offset...].withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
        if count > 0 { offset += count }
        if offset == payload.count || count < 0 { output.close() }
    }
}

/// Reads whatever the input stream has each time it says so.
public final class RunLoopReader: NSObject, StreamDelegate, @unchecked Sendable {
    override public init() {}

    private let record = Mutex<(events: [UInt], received: [UInt8], ended: Bool, threads: Set<UInt>)>(([], [], false, []))
    public var events: [Stream.Event] { record.withLock { $0.events }.map { Stream.Event(rawValue: $0) } }
    public var received: [UInt8] { record.withLock { $0.received } }
    public var ended: Bool { record.withLock { $0.ended } }
    /// The threads the delegate was called on.
    public var threads: Set<UInt> { record.withLock { $0.threads } }

    public func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        record.withLock {
            $0.events.append(eventCode.rawValue)
            $0.threads.insert(UInt(pthread_self()))
        }
        switch eventCode {
        case .hasBytesAvailable:
            guard let input = aStream as? InputStream else { return }
            var buffer = [UInt8](repeating: 0, count: 700)
            let count = buffer.withUnsafeMutableBufferPointer { input.read($0.baseAddress!, maxLength: $0.count) }
            if count > 0 { record.withLock { $0.received += buffer[..<count] } }
        case .endEncountered:
            aStream.close()
            record.withLock { $0.ended = true }
        default:
            break
        }
    }
}
