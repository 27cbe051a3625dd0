import CourierCore
import CourierHTTP1
import CourierReactor
import Foundation

/// Sending a request body: bytes sent so far, and a streamed body fetched chunk by chunk as the
/// channel has room for it (with chunked framing when its length is unknown).
extension HTTP1Connection {
    func bodySent(_ count: Int64) {
        guard active != nil else { return }
        active!.bodyBytesSent += count
        active!.lastActivity = loop.now
        let exchange = active!.exchange
        exchange.delegate.exchange(exchange, didSendBodyBytes: active!.bodyBytesSent)
    }

    /// Writes more of a body given as bytes, or fetches the next chunk of a streamed one, when
    /// the channel has room for it.
    func pumpBody() {
        if let current = active, case .bytes(let data, let sent) = current.body {
            writeBytes(data, from: sent)
            return
        }
        guard let current = active, case .streaming(let producer, let length, false) = current.body else { return }
        guard stream.pendingWriteBytes < Self.bodyHighWatermark else { return }
        active!.body = .streaming(producer, length: length, reading: true)
        let exchange = current.exchange
        let bound = LoopBound(self, loop: loop)
        producer.readChunk(maxLength: Self.bodyChunkSize, deliveringOn: loop) { outcome in
            bound.value.bodyChunkRead(outcome, for: exchange)
        }
    }

    /// Writes `data` from `offset` on while the channel holds less than its high-water mark,
    /// a high-water mark's worth at a time; what the socket does not take waits in the channel,
    /// and its draining brings the next call.
    private func writeBytes(_ data: Data, from offset: Int) {
        var sent = offset
        while sent < data.count, !isClosed, active != nil, stream.pendingWriteBytes < Self.bodyHighWatermark {
            let end = min(data.count, sent + Self.bodyHighWatermark)
            data.withUnsafeBytes { body in stream.write(UnsafeRawBufferPointer(rebasing: body[sent..<end])) }
            bodySent(Int64(end - sent))
            sent = end
        }
        // The write may have failed the exchange, or a callback ended it.
        guard !isClosed, let current = active, case .bytes = current.body else { return }
        if sent < data.count {
            current.body = .bytes(data, sent: sent)
            return
        }
        current.body = .complete
        if current.exchange.request.collectsTimings { current.metrics.requestEnd = .now }
    }

    private func bodyChunkRead(_ result: Result<Data, BodyStreamFailure>, for exchange: HTTPExchange) {
        guard let current = active, current.exchange === exchange,
              case .streaming(let producer, let length, true) = current.body else { return }
        switch result {
        case .failure(let failure):
            failActive(.bodyStream(failure.message))
            close()
        case .success(let chunk):
            if chunk.isEmpty {
                if let length, current.bodyBytesSent != length {
                    failActive(.bodyStream("the body ended after \(current.bodyBytesSent) of \(length) bytes"))
                    close()
                    return
                }
                if length == nil {
                    sendBuffer.clear()
                    HTTP1RequestEncoder.encodeLastChunk(into: &sendBuffer)
                    sendBuffer.withReadableBytes { stream.write($0) }
                }
                active!.body = .complete
                if exchange.request.collectsTimings { active!.metrics.requestEnd = .now }
                return
            }
            if let length, current.bodyBytesSent + Int64(chunk.count) > length {
                failActive(.bodyStream("the body is longer than its declared \(length) bytes"))
                close()
                return
            }
            chunk.withUnsafeBytes { data in
                if length == nil {
                    sendBuffer.clear()
                    HTTP1RequestEncoder.encodeChunkHeader(length: data.count, into: &sendBuffer)
                    let header = sendBuffer.readableBytesArray()
                    header.withUnsafeBytes { head in
                        Self.crlf.withUnsafeBytes { crlf in stream.write([head, data, crlf]) }
                    }
                } else {
                    stream.write(data)
                }
            }
            active!.body = .streaming(producer, length: length, reading: false)
            bodySent(Int64(chunk.count))
            pumpBody()
        }
    }

    private static let crlf: [UInt8] = [13, 10]
}

/// Why reading a streamed request body failed.
struct BodyStreamFailure: Error {
    var message: String
}
