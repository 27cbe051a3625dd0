import CourierCore
import CourierHTTP2
import CourierReactor
import Foundation

/// Sending request bodies: from the bytes of the request, or read chunk by chunk from a
/// producer as nghttp2 asks for more.
extension HTTP2Connection {
    func http2Stream(_ streamID: Int32, readBodyInto buffer: UnsafeMutableRawBufferPointer) -> HTTP2BodyChunk {
        guard let current = streams[streamID] else { return .bytes(count: 0, end: true) }
        switch current.body {
        case .none:
            return .bytes(count: 0, end: true)
        case .bytes(let data, let offset):
            let count = min(buffer.count, data.count - offset)
            data.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: count) }
            current.body = .bytes(data, offset: offset + count)
            let end = offset + count == data.count
            if end { current.metrics.requestEnd = .now }
            bodySent(streamID, count)
            return .bytes(count: count, end: end)
        case .producer(let producer, let chunk, let offset, let ended, let reading):
            if offset < chunk.count {
                let count = min(buffer.count, chunk.count - offset)
                chunk.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: count) }
                let end = ended && offset + count == chunk.count
                current.body = .producer(producer, chunk: chunk, offset: offset + count, ended: ended, reading: reading)
                if end { current.metrics.requestEnd = .now }
                bodySent(streamID, count)
                return .bytes(count: count, end: end)
            }
            if ended {
                current.metrics.requestEnd = .now
                return .bytes(count: 0, end: true)
            }
            if !reading { readNextChunk(streamID, producer) }
            return .notReady
        }
    }

    private func readNextChunk(_ streamID: Int32, _ producer: RequestBodyProducer) {
        guard let current = streams[streamID], case .producer(_, _, _, _, false) = current.body else { return }
        current.body = .producer(producer, chunk: Data(), offset: 0, ended: false, reading: true)
        let exchange = current.exchange
        let bound = LoopBound(self, loop: loop)
        producer.readChunk(maxLength: HTTP1Connection.bodyChunkSize, deliveringOn: loop) { outcome in
            bound.value.chunkRead(streamID, exchange, producer, outcome)
        }
    }

    private func chunkRead(_ streamID: Int32, _ exchange: HTTPExchange, _ producer: RequestBodyProducer, _ outcome: Result<Data, BodyStreamFailure>) {
        guard let current = streams[streamID], current.exchange === exchange else { return }
        switch outcome {
        case .failure(let failure):
            finishStream(streamID, .failure(.bodyStream(failure.message)))
            session.cancelStream(streamID)
        case .success(let chunk):
            if case .stream(_, let length?) = exchange.request.body {
                let total = current.bodyBytesSent + Int64(chunk.count)
                if (chunk.isEmpty && total != length) || total > length {
                    finishStream(streamID, .failure(.bodyStream("the body does not match its declared \(length) bytes")))
                    session.cancelStream(streamID)
                    flush()
                    return
                }
            }
            streams[streamID]!.body = .producer(producer, chunk: chunk, offset: 0, ended: chunk.isEmpty, reading: false)
            session.resumeBody(streamID: streamID)
        }
        flush()
    }

    private func bodySent(_ streamID: Int32, _ count: Int) {
        guard count > 0, let current = streams[streamID] else { return }
        current.bodyBytesSent += Int64(count)
        current.lastActivity = .now
        current.exchange.delegate.exchange(current.exchange, didSendBodyBytes: current.bodyBytesSent)
    }
}
