import CourierCore
import CourierReactor

/// Giving the loop's receive buffer away to the exchange whose body a read holds.
extension HTTP1Connection {
    /// See ``HTTPExchange/takeReceiveBuffer(holding:replacement:)``: `bytes` must be in the
    /// loop's receive buffer and end the read ``streamDidRead(_:)`` is parsing. Once given, the
    /// buffer is not the read's any more: the parse goes on with only the empty rest of it.
    func takeReceiveBuffer(
        holding bytes: UnsafeRawBufferPointer, for exchange: HTTPExchange, replacement: () -> UnsafeMutableRawPointer
    ) -> UnsafeMutableRawPointer? {
        guard loop.inEventLoop, active?.exchange === exchange, let end = readEnd, let start = bytes.baseAddress,
              start + bytes.count == end, let base = loop.readBuffer.baseAddress,
              start >= UnsafeRawPointer(base), end <= UnsafeRawPointer(base + loop.readBuffer.count)
        else { return nil }
        readEnd = nil
        return loop.giveAwayReadBuffer(for: replacement())
    }
}
