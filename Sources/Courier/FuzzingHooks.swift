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
}
