@_exported import Synchronization
import CCourierLinux

/// The lock every Courier module uses: Synchronization's `Mutex`, whose taking and giving up
/// ThreadSanitizer can see.
///
/// On Linux, `Synchronization.Mutex` waits in the kernel (`FUTEX_LOCK_PI`) inside a standard
/// library not built for ThreadSanitizer, so a lock taken after waiting orders nothing as far
/// as TSan knows, and every access it guards is reported as a race. This type wraps it and
/// marks the lock's address with `__tsan_acquire` once the lock is held and
/// `__tsan_release` before it is given up. Without TSan's runtime those two symbols are null
/// and the marks are one untaken branch each.
///
/// Importing `CourierSync` brings Synchronization with it, and this `Mutex` shadows the
/// standard one: a file imports `CourierSync` instead of `Synchronization` (importing both makes
/// `Mutex` ambiguous, and the build says so).
@frozen
public struct Mutex<Value: ~Copyable>: ~Copyable {
    @usableFromInline
    let base: Synchronization.Mutex<Value>

    /// A lock guarding `initialValue`.
    @inlinable
    public init(_ initialValue: consuming sending Value) {
        base = Synchronization.Mutex(initialValue)
    }

    /// Runs `body` with the lock held and the guarded value lent to it.
    @inlinable
    public borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        // The lock's own address names it to TSan. It is only ever compared, never read
        // through; taking the guarded value's address instead would be an access TSan checks
        // before the lock is marked held.
        let address = withUnsafePointer(to: self) { UnsafeMutableRawPointer(mutating: $0) }
        return try base.withLock { (value: inout sending Value) throws(E) -> sending Result in
            courier_tsan_acquire(address)
            defer { courier_tsan_release(address) }
            return try body(&value)
        }
    }

    /// Runs `body` with the lock held when it is free now; nil, without waiting, when another
    /// thread holds it.
    @inlinable
    public borrowing func withLockIfAvailable<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result? {
        let address = withUnsafePointer(to: self) { UnsafeMutableRawPointer(mutating: $0) }
        return try base.withLockIfAvailable { (value: inout sending Value) throws(E) -> sending Result in
            courier_tsan_acquire(address)
            defer { courier_tsan_release(address) }
            return try body(&value)
        }
    }
}

extension Mutex: @unchecked Sendable where Value: ~Copyable {}
