import Foundation

/// The buffer between the two ends of a bound pair (`Stream.getBoundStreams`), and the state of
/// both ends. Every method may be called from any thread; `read` and `write` block the caller,
/// `read(maxLength:whenAvailable:)` never does.
final class BoundStreamPipe: @unchecked Sendable {
    private enum End { case notOpen, open, closed }

    /// A non-blocking read waiting for bytes.
    private struct PendingRead {
        var maxLength: Int
        var deliver: @Sendable (Result<Data, any Error>) -> Void
    }

    /// What a call decided, acted on once the lock is released.
    private struct Effects {
        var inputEvents: [Stream.Event] = []
        var outputEvents: [Stream.Event] = []
        var delivery: (@Sendable (Result<Data, any Error>) -> Void, Result<Data, any Error>)?
    }

    private let condition = NSCondition()
    private let capacity: Int
    weak var input: BoundInputStream?
    weak var output: BoundOutputStream?

    // All guarded by `condition`.
    /// The bytes written and not yet read, oldest first; `firstOffset` bytes of the first are read.
    private var chunks: [Data] = []
    private var firstOffset = 0
    private var buffered = 0
    private var reader = End.notOpen
    private var writer = End.notOpen
    /// The input stream was closed or released: nothing will be read any more.
    private var readerGone = false
    /// The output stream was closed or released: no byte will be written any more.
    private var writerEnded = false
    /// The reader has been handed the end (a read returned 0).
    private var readerAtEnd = false
    private var endPosted = false
    private var writeError: NSError?
    /// The next bytes (space) event may be posted: the delegate has read (written) since the last.
    private var wantsBytesEvent = true
    private var wantsSpaceEvent = true
    private var pendingRead: PendingRead?

    init(capacity: Int) {
        self.capacity = max(capacity, 1)
    }

    // MARK: The reading end

    var readerStatus: Stream.Status {
        condition.withLock {
            switch reader {
            case .notOpen: return .notOpen
            case .closed: return .closed
            case .open: return readerAtEnd ? .atEnd : .open
            }
        }
    }

    var readerHasBytes: Bool {
        condition.withLock { reader == .open && (buffered > 0 || (writerEnded && !readerAtEnd)) }
    }

    func openReader() {
        let effects = condition.withLock { () -> Effects in
            guard reader == .notOpen, !readerGone else { return Effects() }
            reader = .open
            var effects = Effects()
            effects.inputEvents.append(.openCompleted)
            noteReadable(&effects)
            return effects
        }
        perform(effects)
    }

    func closeReader(notify: Bool) {
        let effects = condition.withLock { () -> Effects in
            guard !readerGone else { return Effects() }
            readerGone = true
            if notify { reader = .closed }
            chunks = []
            firstOffset = 0
            buffered = 0
            var effects = Effects()
            if let pending = pendingRead {
                pendingRead = nil
                effects.delivery = (pending.deliver, .failure(Self.readerClosedError()))
            }
            if writer == .open, !writerEnded {
                writeError = Self.readerClosedError()
                effects.outputEvents.append(.errorOccurred)
            }
            condition.broadcast()
            return effects
        }
        perform(effects)
    }

    /// Blocks until there are bytes or the output stream has ended; -1 when this end is not open.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let (count, effects) = condition.withLock { () -> (Int, Effects) in
            guard reader == .open, !readerGone else { return (-1, Effects()) }
            guard buffer.count > 0, !readerAtEnd else { return (0, Effects()) }
            while buffered == 0, !writerEnded, !readerGone { condition.wait() }
            var effects = Effects()
            guard buffered > 0 else {
                readerAtEnd = true
                return (0, effects)
            }
            let count = take(into: buffer)
            wantsBytesEvent = true
            noteReadable(&effects)
            noteWritable(&effects)
            return (count, effects)
        }
        perform(effects)
        return count
    }

    func read(maxLength: Int, whenAvailable deliver: @escaping @Sendable (Result<Data, any Error>) -> Void) {
        let effects = condition.withLock { () -> Effects in
            var effects = Effects()
            if readerGone || reader == .closed {
                effects.delivery = (deliver, .failure(Self.readerClosedError()))
            } else if buffered > 0 {
                effects.delivery = (deliver, .success(takeData(maxLength: maxLength)))
                noteWritable(&effects)
            } else if writerEnded {
                readerAtEnd = true
                effects.delivery = (deliver, .success(Data()))
            } else {
                pendingRead = PendingRead(maxLength: maxLength, deliver: deliver)
            }
            return effects
        }
        perform(effects)
    }

    // MARK: The writing end

    var writerStatus: Stream.Status {
        condition.withLock {
            if writeError != nil { return .error }
            switch writer {
            case .notOpen: return .notOpen
            case .open: return .open
            case .closed: return .closed
            }
        }
    }

    var writerError: (any Error)? { condition.withLock { writeError } }

    var writerHasSpace: Bool {
        condition.withLock { writer == .open && (buffered < capacity || readerGone) }
    }

    func openWriter() {
        let effects = condition.withLock { () -> Effects in
            guard writer == .notOpen, !writerEnded else { return Effects() }
            writer = .open
            var effects = Effects()
            effects.outputEvents.append(.openCompleted)
            noteWritable(&effects)
            return effects
        }
        perform(effects)
    }

    func closeWriter() {
        let effects = condition.withLock { () -> Effects in
            guard !writerEnded else { return Effects() }
            writerEnded = true
            if writer == .open { writer = .closed }
            var effects = Effects()
            if let pending = pendingRead {
                pendingRead = nil
                readerAtEnd = true
                effects.delivery = (pending.deliver, .success(Data()))
            }
            noteReadable(&effects)
            condition.broadcast()
            return effects
        }
        perform(effects)
    }

    /// Blocks while the buffer is full; writes as much as fits. -1 when this end is not open or
    /// the input stream has gone.
    func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        let (count, effects) = condition.withLock { () -> (Int, Effects) in
            guard writer == .open, writeError == nil else { return (-1, Effects()) }
            guard bytes.count > 0 else { return (0, Effects()) }
            while buffered >= capacity, !readerGone, writer == .open { condition.wait() }
            var effects = Effects()
            guard writer == .open else { return (-1, effects) }
            if readerGone {
                writeError = Self.readerClosedError()
                return (-1, effects)
            }
            let count = min(bytes.count, capacity - buffered)
            chunks.append(Data(bytes.prefix(count)))
            buffered += count
            wantsSpaceEvent = true
            if let pending = pendingRead {
                pendingRead = nil
                effects.delivery = (pending.deliver, .success(takeData(maxLength: pending.maxLength)))
            }
            noteReadable(&effects)
            noteWritable(&effects)
            condition.broadcast()
            return (count, effects)
        }
        perform(effects)
        return count
    }

    // MARK: Helpers (called with the lock held)

    /// Moves up to `buffer.count` buffered bytes into `buffer`.
    private func take(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var copied = 0
        while copied < buffer.count, let first = chunks.first {
            let available = first.count - firstOffset
            let count = min(available, buffer.count - copied)
            first.withUnsafeBytes { source in
                let start = source.baseAddress! + firstOffset
                UnsafeMutableRawBufferPointer(rebasing: buffer[copied..<copied + count]).copyMemory(from: UnsafeRawBufferPointer(start: start, count: count))
            }
            copied += count
            if count == available {
                chunks.removeFirst()
                firstOffset = 0
            } else {
                firstOffset += count
            }
        }
        buffered -= copied
        condition.broadcast()
        return copied
    }

    private func takeData(maxLength: Int) -> Data {
        readIntoNewData(min(maxLength, buffered)) { take(into: UnsafeMutableRawBufferPointer(start: $0, count: $1)) } ?? Data()
    }

    /// Queues the input stream's next event, if its delegate may have one.
    private func noteReadable(_ effects: inout Effects) {
        guard reader == .open, !readerGone else { return }
        if buffered > 0 {
            if wantsBytesEvent {
                wantsBytesEvent = false
                effects.inputEvents.append(.hasBytesAvailable)
            }
        } else if writerEnded, !endPosted {
            endPosted = true
            effects.inputEvents.append(.endEncountered)
        }
    }

    /// Queues the output stream's `.hasSpaceAvailable`, if its delegate may have one.
    private func noteWritable(_ effects: inout Effects) {
        guard writer == .open, wantsSpaceEvent, buffered < capacity || readerGone else { return }
        wantsSpaceEvent = false
        effects.outputEvents.append(.hasSpaceAvailable)
    }

    private func perform(_ effects: Effects) {
        if let (deliver, result) = effects.delivery { deliver(result) }
        if !effects.inputEvents.isEmpty, let input {
            for event in effects.inputEvents {
                input.events.post(event, for: input) { [weak self] in self?.readerStatus.isLive ?? false }
            }
        }
        if !effects.outputEvents.isEmpty, let output {
            for event in effects.outputEvents {
                output.events.post(event, for: output) { [weak self] in self?.writerStatus.isLive ?? false }
            }
        }
    }

    private static func readerClosedError() -> NSError {
        NSError(domain: NSPOSIXErrorDomain, code: Int(EPIPE), userInfo: [
            NSLocalizedDescriptionKey: "The input stream of the bound pair was closed.",
        ])
    }
}

private extension Stream.Status {
    /// The stream has not been closed (events for it are still wanted).
    var isLive: Bool { self != .closed && self != .notOpen }
}
