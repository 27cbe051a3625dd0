import CourierSync
import Foundation

/// The reading end a stream task's connection becomes after `captureStreams()`. `read` blocks
/// until bytes arrive, as a socket's stream does; scheduled in a run loop it tells its delegate
/// `.openCompleted`, `.hasBytesAvailable` (again only after the delegate has read),
/// `.endEncountered` and `.errorOccurred`.
final class StreamTaskInputStream: InputStream {
    private let driver: StreamTaskDriver
    private let events = StreamEventSchedule()
    private let state = CapturedStreamState()
    private let lock = NSLock()
    // Guarded by `lock`.
    private var wantsBytesEvent = true
    private var endPending = false

    init(driver: StreamTaskDriver) {
        self.driver = driver
        super.init(data: Data())
    }

    deinit { driver.streamsReleased() }

    override func open() {
        guard state.open() else { return }
        post(.openCompleted)
        if hasBytesAvailable { postBytesAvailable() }
    }

    override func close() {
        _ = state.close()
        driver.enqueue(.closeRead, fromStreams: true)
    }

    override var streamStatus: Stream.Status { state.status }
    override var streamError: (any Error)? { state.error }

    override var hasBytesAvailable: Bool {
        driver.availableBytes.load(ordering: .relaxed) > 0 || driver.sawEndOfStream.load(ordering: .relaxed)
    }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength length: Int) -> Int {
        switch streamStatus {
        case .open: break
        case .atEnd: return 0
        default: return -1
        }
        guard length > 0 else { return 0 }
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<(Data, Bool), any Error>?>(nil)
        driver.read(minimum: 1, maximum: length, timeout: 0, completion: { result in
            outcome.withLock { $0 = result }
            done.signal()
        }, fromStreams: true)
        done.wait()
        switch outcome.withLock({ $0 }) {
        case .success(let (data, atEnd)):
            data.copyBytes(to: buffer, count: data.count)
            if data.isEmpty { state.reachEnd() }
            let postEnd = lock.withLock { () -> Bool in
                wantsBytesEvent = true
                if data.isEmpty || (atEnd && endPending) {
                    defer { endPending = false }
                    return endPending || data.isEmpty
                }
                return false
            }
            if postEnd {
                post(.endEncountered)
            } else if driver.availableBytes.load(ordering: .relaxed) > 0 {
                postBytesAvailable()
            }
            return data.count
        case .failure(let failure):
            _ = state.fail(failure)
            return -1
        case nil:
            return -1
        }
    }

    override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length: UnsafeMutablePointer<Int>) -> Bool {
        false
    }

    override var delegate: (any StreamDelegate)? {
        get { events.delegate }
        set { events.delegate = newValue }
    }

    override func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) { events.schedule(in: runLoop, forMode: mode) }
    override func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) { events.remove(from: runLoop, forMode: mode) }

    // MARK: From the driver

    func bytesArrived() { postBytesAvailable() }

    /// The peer's end of stream: told once what came before it has been read.
    func endArrived() {
        let open = state.status == .open
        let now = lock.withLock { () -> Bool in
            guard driver.availableBytes.load(ordering: .relaxed) == 0 else {
                endPending = true
                return false
            }
            return open
        }
        if now { post(.endEncountered) } else { postBytesAvailable() }
    }

    func connectionEnded(_ failure: any Error) {
        if state.fail(failure) { post(.errorOccurred) }
    }

    private func postBytesAvailable() {
        let open = state.status == .open
        let post = lock.withLock { () -> Bool in
            guard open, wantsBytesEvent else { return false }
            wantsBytesEvent = false
            return true
        }
        if post { self.post(.hasBytesAvailable) }
    }

    private func post(_ event: Stream.Event) {
        let reference = WeakStream(stream: self)
        events.post(event, for: self) { reference.stream?.streamStatus != .closed }
    }
}

/// The writing end a stream task's connection becomes after `captureStreams()`. `write` blocks
/// until its bytes are sent; closing it sends the end of stream (close_notify on TLS, then FIN).
final class StreamTaskOutputStream: OutputStream {
    private let driver: StreamTaskDriver?
    private let events = StreamEventSchedule()
    private let state = CapturedStreamState()

    /// The most a single `write` takes.
    static let chunk = 64 << 10

    init(driver: StreamTaskDriver) {
        self.driver = driver
        super.init(toMemory: ())
    }

    /// Only for Foundation's `required` initializer: one made this way is a plain stream into memory.
    required init(toMemory: ()) {
        driver = nil
        super.init(toMemory: ())
    }

    deinit {
        if let driver {
            if state.status == .open { driver.enqueue(.closeWrite, fromStreams: true) }
            driver.streamsReleased()
        }
    }

    override func open() {
        guard driver != nil else { return super.open() }
        guard state.open() else { return }
        post(.openCompleted)
        post(.hasSpaceAvailable)
    }

    override func close() {
        guard let driver else { return super.close() }
        if state.close() { driver.enqueue(.closeWrite, fromStreams: true) }
    }

    override var streamStatus: Stream.Status { driver == nil ? super.streamStatus : state.status }
    override var streamError: (any Error)? { driver == nil ? super.streamError : state.error }
    override var hasSpaceAvailable: Bool { driver == nil ? super.hasSpaceAvailable : streamStatus == .open }

    override func write(_ buffer: UnsafePointer<UInt8>, maxLength length: Int) -> Int {
        guard let driver else { return super.write(buffer, maxLength: length) }
        guard streamStatus == .open else { return -1 }
        guard length > 0 else { return 0 }
        let count = min(length, Self.chunk)
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<(any Error)??>(nil)
        driver.write(Data(bytes: buffer, count: count), timeout: 0, completion: { error in
            outcome.withLock { $0 = .some(error) }
            done.signal()
        }, fromStreams: true)
        done.wait()
        if case .some(.some(let failure)) = outcome.withLock({ $0 }) {
            if state.fail(failure) { post(.errorOccurred) }
            return -1
        }
        post(.hasSpaceAvailable)
        return count
    }

    override var delegate: (any StreamDelegate)? {
        get { driver == nil ? super.delegate : events.delegate }
        set { if driver == nil { super.delegate = newValue } else { events.delegate = newValue } }
    }

    override func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard driver != nil else { return super.schedule(in: runLoop, forMode: mode) }
        events.schedule(in: runLoop, forMode: mode)
    }

    override func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard driver != nil else { return super.remove(from: runLoop, forMode: mode) }
        events.remove(from: runLoop, forMode: mode)
    }

    func connectionEnded(_ failure: any Error) {
        if state.fail(failure) { post(.errorOccurred) }
    }

    private func post(_ event: Stream.Event) {
        let reference = WeakStream(stream: self)
        events.post(event, for: self) { reference.stream?.streamStatus != .closed }
    }
}

/// A stream looked at again from a run loop, to see whether it was closed meanwhile.
private struct WeakStream: @unchecked Sendable {
    weak var stream: Stream?
}

/// The status and error of a captured stream, for any thread.
private final class CapturedStreamState: @unchecked Sendable {
    private let lock = NSLock()
    // Guarded by `lock`.
    private var current = Stream.Status.notOpen
    private var failure: (any Error)?

    var status: Stream.Status { lock.withLock { current } }
    var error: (any Error)? { lock.withLock { failure } }

    /// Not open → open; false when it was anything else.
    func open() -> Bool {
        lock.withLock {
            guard current == .notOpen else { return false }
            current = .open
            return true
        }
    }

    /// → closed; true when it was open.
    func close() -> Bool {
        lock.withLock {
            defer { current = .closed }
            return current == .open
        }
    }

    func reachEnd() {
        lock.withLock { if current == .open { current = .atEnd } }
    }

    /// Not open or open → error; false when it had ended otherwise (the error is not news).
    func fail(_ error: any Error) -> Bool {
        lock.withLock {
            guard current == .open || current == .notOpen else { return false }
            current = .error
            failure = error
            return true
        }
    }
}
