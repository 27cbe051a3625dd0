import Foundation

extension Stream {
    /// Makes a bound pair, as on Apple platforms (swift-corelibs-foundation has no such call):
    /// the bytes written to `outputStream` are the bytes read from `inputStream`, through a
    /// buffer of `bufferSize` bytes (at least 1).
    ///
    /// Give the input stream to `uploadTask(withStreamedRequest:)` and write the body into the
    /// output stream from your own thread, or from a run loop with a delegate. Both ends block as
    /// Apple's do: `write` waits while the buffer is full, `read` while it is empty and the output
    /// stream is still open. Closing (or releasing) the output stream ends the input stream's
    /// bytes; closing (or releasing) the input stream makes further writes fail with `EPIPE`.
    /// A stream scheduled in a run loop tells its delegate `.openCompleted`, `.hasSpaceAvailable`
    /// or `.hasBytesAvailable`, `.endEncountered` and `.errorOccurred` there; after
    /// `.hasSpaceAvailable` (`.hasBytesAvailable`) the next comes only once the delegate has
    /// written (read).
    public class func getBoundStreams(
        withBufferSize bufferSize: Int,
        inputStream: UnsafeMutablePointer<InputStream?>?,
        outputStream: UnsafeMutablePointer<OutputStream?>?
    ) {
        let pipe = BoundStreamPipe(capacity: bufferSize)
        let input = BoundInputStream(pipe: pipe)
        let output = BoundOutputStream(pipe: pipe)
        pipe.input = input
        pipe.output = output
        inputStream?.pointee = input
        outputStream?.pointee = output
    }
}

/// The reading end of a bound pair.
final class BoundInputStream: InputStream {
    fileprivate let pipe: BoundStreamPipe
    let events = StreamEventSchedule()

    fileprivate init(pipe: BoundStreamPipe) {
        self.pipe = pipe
        super.init(data: Data())
    }

    deinit { pipe.closeReader(notify: false) }

    override func open() { pipe.openReader() }
    override func close() { pipe.closeReader(notify: true) }
    override var streamStatus: Stream.Status { pipe.readerStatus }
    override var streamError: (any Error)? { nil }
    override var hasBytesAvailable: Bool { pipe.readerHasBytes }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength length: Int) -> Int {
        pipe.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max(length, 0)))
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

    /// Reads without blocking: `deliver` gets the next bytes (at most `maxLength`), empty data
    /// at the end, or an error, as soon as there is something to say, on whichever thread
    /// that happens (possibly this one, before returning).
    func read(maxLength: Int, whenAvailable deliver: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        pipe.read(maxLength: max(maxLength, 1), whenAvailable: deliver)
    }
}

/// The writing end of a bound pair.
final class BoundOutputStream: OutputStream {
    fileprivate let pipe: BoundStreamPipe?
    let events = StreamEventSchedule()

    fileprivate init(pipe: BoundStreamPipe) {
        self.pipe = pipe
        super.init(toMemory: ())
    }

    /// Only for Foundation's `required` initializer: a bound output stream is made by
    /// `Stream.getBoundStreams`, and one made this way is a plain stream into memory.
    required init(toMemory: ()) {
        pipe = nil
        super.init(toMemory: ())
    }

    deinit { pipe?.closeWriter() }

    override func open() {
        guard let pipe else { return super.open() }
        pipe.openWriter()
    }

    override func close() {
        guard let pipe else { return super.close() }
        pipe.closeWriter()
    }

    override var streamStatus: Stream.Status { pipe?.writerStatus ?? super.streamStatus }
    override var streamError: (any Error)? { pipe.map { $0.writerError } ?? super.streamError }
    override var hasSpaceAvailable: Bool { pipe?.writerHasSpace ?? super.hasSpaceAvailable }

    override func write(_ buffer: UnsafePointer<UInt8>, maxLength length: Int) -> Int {
        guard let pipe else { return super.write(buffer, maxLength: length) }
        return pipe.write(UnsafeRawBufferPointer(start: buffer, count: max(length, 0)))
    }

    override var delegate: (any StreamDelegate)? {
        get { pipe == nil ? super.delegate : events.delegate }
        set { if pipe == nil { super.delegate = newValue } else { events.delegate = newValue } }
    }

    override func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard pipe != nil else { return super.schedule(in: runLoop, forMode: mode) }
        events.schedule(in: runLoop, forMode: mode)
    }

    override func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard pipe != nil else { return super.remove(from: runLoop, forMode: mode) }
        events.remove(from: runLoop, forMode: mode)
    }
}

/// Where a stream's events go: its delegate, on each run loop (and mode) it is scheduled in.
final class StreamEventSchedule: @unchecked Sendable {
    private let lock = NSLock()
    /// Guarded by `lock`.
    private var places: [(runLoop: RunLoop, mode: RunLoop.Mode)] = []
    /// Guarded by `lock`.
    private weak var storedDelegate: (any StreamDelegate)?

    var delegate: (any StreamDelegate)? {
        get { lock.withLock { storedDelegate } }
        set { lock.withLock { storedDelegate = newValue } }
    }

    func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.withLock {
            if !places.contains(where: { $0.runLoop === runLoop && $0.mode == mode }) { places.append((runLoop, mode)) }
        }
    }

    func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.withLock { places.removeAll { $0.runLoop === runLoop && $0.mode == mode } }
    }

    /// Tells the delegate `event` on the run loops the stream is scheduled in, unless
    /// `stillWanted` says otherwise by the time a run loop gets to it (the stream was closed).
    func post(_ event: Stream.Event, for stream: Stream, stillWanted: @escaping @Sendable () -> Bool) {
        let places = lock.withLock { self.places }
        guard !places.isEmpty else { return }
        let box = UncheckedStream(stream: stream)
        for place in places {
            let timer = Timer(timeInterval: 0, repeats: false) { [weak self] _ in
                guard stillWanted(), let delegate = self?.delegate else { return }
                delegate.stream(box.stream, handle: event)
            }
            place.runLoop.add(timer, forMode: place.mode)
        }
    }
}

/// A stream carried to the run loop that tells its delegate about it.
private struct UncheckedStream: @unchecked Sendable {
    let stream: Stream
}
