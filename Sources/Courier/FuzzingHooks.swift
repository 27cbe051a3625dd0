import CourierCore
import CourierHTTP1
import CourierTransport
import Foundation

/// Entry points for Courier's fuzz targets; not API. Reach them with
/// `@_spi(Fuzzing) import Courier`.
@_spi(Fuzzing)
public enum FuzzingHooks {
    /// Builds the wire head Courier would send for `request` with a default configuration,
    /// without any I/O; throws the URLError that building would fail the task with.
    public static func encodedHead(for request: URLRequest) throws -> [UInt8] {
        let transportRequest = try RequestBuilder.make(request, configuration: .default, body: .request)
        var buffer = ByteBuffer()
        do {
            try HTTP1RequestEncoder.encodeHead(transportRequest.head, framing: transportRequest.framing, into: &buffer)
        } catch {
            throw URLError.from(.localProtocol(error), url: request.url)
        }
        return buffer.readableBytesArray()
    }

    /// Whether the one-pass reading of `url`'s origin and target, where it answers, agrees
    /// with Foundation's reading of them.
    public static func plainURLReadingAgrees(_ url: URL) -> Bool {
        guard let (origin, target) = RequestBuilder.plainParts(of: url) else { return true }
        guard let slowOrigin = try? RequestBuilder.origin(of: url) else { return false }
        return origin == slowOrigin && origin.authority == slowOrigin.authority && target == RequestBuilder.target(of: url)
    }
}
