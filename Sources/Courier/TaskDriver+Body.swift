import CourierPolicies
import CourierTransport
import Foundation

/// The body of the delivered response on its way to the sink: decoded as it streams (the
/// response's content codings), collected for the cache when it will be stored.
extension TaskDriver {
    /// Decodes body bytes of the delivered response and passes them to the sink. `decoder` is
    /// the response's (read with the bytes' bookkeeping, under the same lock).
    func deliverBody(_ bytes: UnsafeRawBufferPointer, from exchange: HTTPExchange?, decoder: ContentDecoder?) {
        guard !bytes.isEmpty else { return }
        var failure: URLError?
        if let decoder {
            do throws(ContentDecodingError) {
                var decoded: Int64 = 0
                let collecting = state.withLock { $0.cache.collected != nil }
                try decoder.decode(bytes) { output in
                    decoded += Int64(output.count)
                    if collecting { state.withLock { collectForCache(output, in: &$0) } }
                    if failure == nil { failure = sink.receive(output, from: exchange, driver: self) }
                }
                state.withLock { $0.decodedBytes += decoded }
            } catch {
                failure = decodingFailure(error)
            }
        } else {
            failure = sink.receive(bytes, from: exchange, driver: self)
        }
        if let failure { fail(failure, with: .deliveryFailed) }
    }

    /// Flushes the decoder at the end of the body; nil, or the error that fails the task.
    func finishDecoding() -> URLError? {
        guard let decoder = state.withLock({ $0.decoder }) else { return nil }
        var failure: URLError?
        do throws(ContentDecodingError) {
            try decoder.finish { output in
                state.withLock { collectForCache(output, in: &$0) }
                if failure == nil { failure = sink.receive(output, from: nil, driver: self) }
            }
        } catch {
            return decodingFailure(error)
        }
        return failure
    }

    func decodingFailure(_ error: ContentDecodingError) -> URLError {
        let url = currentURL
        switch error {
        case .decodedSizeExceeded, .ratioExceeded:
            return .courier(.dataLengthExceedsMaximum, "The response was not decoded: \(error). Raise courierContentDecodingLimits to accept it.", url: url)
        default:
            return .courier(.cannotDecodeContentData, "The response body could not be decoded: \(error).", url: url)
        }
    }
}
