import Courier
import CourierSync
import Foundation
import Testing
import _CourierTestSupport

/// `Stream.getBoundStreams`: the pair's bytes, ends, blocking and run-loop events, with
/// threads and no network.
@Suite("Bound stream pairs")
struct BoundStreamTests {
    private func makePair(bufferSize: Int) throws -> (InputStream, OutputStream) {
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: bufferSize, inputStream: &input, outputStream: &output)
        return (try #require(input), try #require(output))
    }

    private func write(_ bytes: [UInt8], to output: OutputStream) -> Int {
        bytes.withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
    }

    private func read(_ maxLength: Int, from input: InputStream) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: maxLength)
        let count = buffer.withUnsafeMutableBufferPointer { input.read($0.baseAddress!, maxLength: maxLength) }
        return count < 0 ? nil : Array(buffer[..<count])
    }

    @Test("bytes written come out in order; closing the output ends the input")
    func bytesThenEnd() throws {
        let (input, output) = try makePair(bufferSize: 64)
        #expect(input.streamStatus == .notOpen && output.streamStatus == .notOpen)
        input.open()
        output.open()
        #expect(output.hasSpaceAvailable)
        #expect(!input.hasBytesAvailable)
        #expect(write([1, 2, 3], to: output) == 3)
        #expect(write([4, 5], to: output) == 2)
        #expect(input.hasBytesAvailable)
        #expect(read(2, from: input) == [1, 2])
        #expect(read(10, from: input) == [3, 4, 5])
        output.close()
        #expect(output.streamStatus == .closed)
        #expect(input.hasBytesAvailable, "the end is something to read")
        #expect(read(10, from: input) == [])
        #expect(input.streamStatus == .atEnd)
        input.close()
        #expect(input.streamStatus == .closed)
        #expect(read(10, from: input) == nil, "a closed stream cannot be read")
    }

    @Test("releasing the output stream ends the input stream's bytes")
    func releasedOutputEnds() throws {
        var input: InputStream?
        do {
            var output: OutputStream?
            Stream.getBoundStreams(withBufferSize: 16, inputStream: &input, outputStream: &output)
            output?.open()
            _ = output.map { write([9, 8, 7], to: $0) }
        }
        let stream = try #require(input)
        stream.open()
        #expect(read(16, from: stream) == [9, 8, 7])
        #expect(read(16, from: stream) == [])
    }

    @Test("a write fits what the buffer holds; a zero or negative size holds one byte")
    func capacity() throws {
        let (input, output) = try makePair(bufferSize: 4)
        input.open()
        output.open()
        #expect(write(Array(0..<10), to: output) == 4)
        #expect(!output.hasSpaceAvailable)
        #expect(read(3, from: input) == [0, 1, 2])
        #expect(output.hasSpaceAvailable)
        #expect(write(Array(4..<10), to: output) == 3)

        for size in [0, -5] {
            let (smallInput, smallOutput) = try makePair(bufferSize: size)
            smallInput.open()
            smallOutput.open()
            #expect(write([1, 2, 3], to: smallOutput) == 1)
            #expect(read(8, from: smallInput) == [1])
        }
    }

    @Test("a write into a full buffer waits for the reader; a read of an empty one waits for the writer")
    func blocking() async throws {
        let (input, output) = try makePair(bufferSize: 8)
        input.open()
        output.open()
        let payload = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let written = Atomic<Int>(0)
        let box = Unchecked(output)
        let writer = Thread {
            let output = box.value
            var offset = 0
            while offset < payload.count {
                let count = payload[offset...].withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
                guard count > 0 else { break }
                offset += count
                written.store(offset, ordering: .relaxed)
            }
            output.close()
        }
        writer.start()
        // The writer fills the buffer, then waits: it cannot get past 8 bytes while nobody reads.
        #expect(await poll { written.load(ordering: .relaxed) == 8 })
        try await Task.sleep(for: .milliseconds(50))
        #expect(written.load(ordering: .relaxed) == 8)
        var received: [UInt8] = []
        while let chunk = read(5, from: input), !chunk.isEmpty { received += chunk }
        #expect(sameBytes(received, payload))
        #expect(input.streamStatus == .atEnd)
    }

    @Test("closing the input stream fails writes with EPIPE, and wakes a writer waiting for room")
    func readerClosed() async throws {
        let (input, output) = try makePair(bufferSize: 4)
        input.open()
        output.open()
        #expect(write([1, 2, 3, 4], to: output) == 4)
        let outcome = Mutex<Int?>(nil)
        let box = Unchecked(output)
        let writer = Thread {
            let output = box.value
            let count = [UInt8](repeating: 5, count: 10).withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
            outcome.withLock { $0 = count }
        }
        writer.start()
        try await Task.sleep(for: .milliseconds(50))
        #expect(outcome.withLock { $0 } == nil, "the buffer is full: the write waits")
        input.close()
        #expect(await poll { outcome.withLock { $0 } != nil })
        #expect(outcome.withLock { $0 } == -1)
        #expect(output.streamStatus == .error)
        let error = try #require(output.streamError as NSError?)
        #expect(error.domain == NSPOSIXErrorDomain && error.code == Int(EPIPE))
        #expect(write([1], to: output) == -1)
    }

    @Test("releasing the input stream fails the next write")
    func releasedInputFailsWrites() throws {
        var output: OutputStream?
        do {
            var input: InputStream?
            Stream.getBoundStreams(withBufferSize: 16, inputStream: &input, outputStream: &output)
            input?.open()
        }
        let stream = try #require(output)
        stream.open()
        #expect(write([1, 2], to: stream) == -1)
        #expect((stream.streamError as NSError?)?.code == Int(EPIPE))
    }

    @Test("streams scheduled in a run loop tell their delegates open, space, bytes and end there")
    func runLoopEvents() async throws {
        let (input, output) = try makePair(bufferSize: 1024)
        let payload = [UInt8]((0..<5000).map { UInt8(truncatingIfNeeded: $0) })
        let writerDelegate = RunLoopWriter(payload: payload)
        let readerDelegate = RunLoopReader()
        let thread = RunLoopThread()
        thread.start()
        #expect(await poll { thread.runLoop != nil })
        let streams = Unchecked((input, output, try #require(thread.runLoop)))
        thread.perform {
            let (input, output, runLoop) = streams.value
            output.delegate = writerDelegate
            output.schedule(in: runLoop, forMode: .default)
            input.delegate = readerDelegate
            input.schedule(in: runLoop, forMode: .default)
            output.open()
            input.open()
        }
        #expect(await poll { readerDelegate.ended })
        thread.stop()
        #expect(sameBytes(readerDelegate.received, payload))
        #expect(readerDelegate.events.first == .openCompleted)
        #expect(readerDelegate.events.last == .endEncountered)
        #expect(writerDelegate.events.first == .openCompleted)
        #expect(writerDelegate.events.contains(.hasSpaceAvailable))
        let loopThread = try #require(thread.threadID)
        #expect(readerDelegate.threads == [loopThread] && writerDelegate.threads == [loopThread])
    }
}

/// Polls `condition` every 10 ms for up to 10 seconds.
private func poll(_ condition: () -> Bool) async -> Bool {
    for _ in 0..<1000 {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}
