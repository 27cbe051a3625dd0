@_exported import Synchronization
import CCourierLinux

/// The lock every Courier module uses: a word in user space, and the kernel (a private futex)
/// only for a thread that finds it held.
///
/// The word is 0 when the lock is free, 1 when held, and 2 when held with a thread that may be
/// sleeping on it. Taking a free lock is one compare-and-exchange and giving it up one exchange;
/// only giving up a word of 2 wakes a sleeper. A thread that finds the lock held spins a while
/// (critical sections here are short), then sets 2 and sleeps until it takes the lock itself.
///
/// Not Synchronization's `Mutex`, which this type wrapped until now: on Linux that one writes the
/// thread's ID into its word (a priority-inheritance futex), which took a call for the ID on
/// every lock and unlock, and a lock the kernel handed over was invisible to ThreadSanitizer, so
/// the wrapper marked every lock for it (two more calls). With this lock (and ``HandoffMutex``
/// for the event loop's `turn`), W1 h1 went from 35,342 to 34,326 instructions a request and W1
/// TLS h2 from 73,708 to 72,900 (callgrind). Every acquisition and release of this lock is an
/// atomic operation in Courier's own code (inlined into the caller, or in CourierSync), which a
/// sanitized build instruments, so ThreadSanitizer sees each one itself.
///
/// What it does not do:
/// - hand the lock to the thread it wakes: a thread that tries the lock in between takes it
///   first. Where one thread waits and others try, use ``HandoffMutex``;
/// - notice a thread taking a lock it holds: that thread sleeps for ever (Synchronization's
///   stopped the program, and no path of the test suite ever did so). A callback that could
///   re-enter is deferred instead (`EventLoop.executeSoon`);
/// - guard a value of no size: the word would then sit at the lock's own address (see `value`),
///   which a debug build's assertion refuses.
///
/// Importing `CourierSync` brings Synchronization with it, and this `Mutex` shadows the
/// standard one: a file imports `CourierSync` instead of `Synchronization` (importing both makes
/// `Mutex` ambiguous, and the build says so).
@frozen
public struct Mutex<Value: ~Copyable>: ~Copyable {
    /// First, at the lock's own address: ThreadSanitizer records the body's access to the value
    /// at that address, and a waiter's compare-and-exchange or exchange on a word there read as
    /// a race with it.
    @usableFromInline
    let value: _Cell<Value>
    /// The lock word, read and written only through ``atomicWord``.
    @usableFromInline
    let word: _Cell<UInt32>

    /// A lock guarding `initialValue`.
    @inlinable
    public init(_ initialValue: consuming sending Value) {
        assert(MemoryLayout<Value>.size > 0, "a Mutex guards a value with a size (see `value`)")
        value = _Cell(initialValue)
        word = _Cell(0)
    }

    /// The word, as the `Atomic` every operation on it goes through. A cell of plain `UInt32`
    /// holds it, not a cell of `Atomic<UInt32>`, because destroying the latter ran `Atomic`'s
    /// generic deinit unspecialized (some 700 instructions of a W1 request); the two have the
    /// same size and alignment, and nothing reads the word except as an `Atomic`.
    @inlinable
    var atomicWord: UnsafeMutablePointer<Atomic<UInt32>> {
        UnsafeMutableRawPointer(word._address).assumingMemoryBound(to: Atomic<UInt32>.self)
    }

    /// Runs `body` with the lock held and the guarded value lent to it.
    @inlinable
    public borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        if !LockWord.takeIfFree(atomicWord) {
            LockWord.lockHeld(atomicWord)
        }
        defer { unlock() }
        return try body(&value._address.pointee)
    }

    /// Runs `body` with the lock held when it is free now; nil, without waiting, when another
    /// thread holds it.
    @inlinable
    public borrowing func withLockIfAvailable<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result? {
        guard LockWord.takeIfFree(atomicWord) else {
            return nil
        }
        defer { unlock() }
        return try body(&value._address.pointee)
    }

    @inlinable
    borrowing func unlock() {
        if atomicWord.pointee.exchange(0, ordering: .releasing) == 2 {
            LockWord.wakeOne(atomicWord)
        }
    }
}

extension Mutex: @unchecked Sendable where Value: ~Copyable {}

/// The slow paths of ``Mutex``, apart from its generic code so that each is compiled once.
@usableFromInline
enum LockWord {
    /// How many times a thread that found the lock held looks again before it sleeps: the count
    /// Synchronization's `Mutex` spins (1,000 on x86, 100 elsewhere), which Courier's locks had
    /// until now. Sleeping sooner cost more than the spin where it was measured, on the loop's
    /// `turn` (performance.md, W2); the other locks' holds are shorter than that one's.
    private static var spins: Int {
        #if arch(x86_64) || arch(i386)
        1000
        #else
        100
        #endif
    }

    /// Takes the lock when its word is 0 (free), marking it 1 (held, nobody asleep); false,
    /// without waiting, otherwise.
    @inlinable
    static func takeIfFree(_ word: UnsafeMutablePointer<Atomic<UInt32>>) -> Bool {
        word.pointee.compareExchange(expected: 0, desired: 1, successOrdering: .acquiring, failureOrdering: .relaxed).exchanged
    }

    /// Takes the lock another thread holds: spins while it may be given up soon, then marks
    /// the word contended (2) and sleeps until an exchange finds it free.
    @usableFromInline
    static func lockHeld(_ word: UnsafeMutablePointer<Atomic<UInt32>>) {
        for _ in 0..<spins {
            courier_spin_pause()
            if word.pointee.load(ordering: .relaxed) == 0, takeIfFree(word) { return }
        }
        // Taken with 2, not 1: another thread may be asleep on the word, and the word must
        // say so to whoever gives the lock up next.
        while word.pointee.exchange(2, ordering: .acquiring) != 0 {
            courier_lock_wait(UnsafeMutableRawPointer(word), 2)
        }
    }

    /// Wakes one thread sleeping on the word; called by the holder that found it at 2.
    @usableFromInline
    static func wakeOne(_ word: UnsafeMutablePointer<Atomic<UInt32>>) {
        courier_lock_wake_one(UnsafeMutableRawPointer(word))
    }
}

/// A lock that one thread waits for while others only try it: Synchronization's `Mutex`, a
/// priority-inheritance futex on Linux, marked for ThreadSanitizer (which cannot see the kernel
/// hand it over).
///
/// The event loop's `turn` is such a lock: the loop takes it for each turn and waits for it, and
/// a thread that borrows the loop only ever tries it. When the loop sleeps on it, the kernel hands
/// it to the loop as the borrower gives it up, so no other borrower can take it first. On
/// ``Mutex`` a borrower could, and the loop went back to sleep: on W2 h1 (client on one CPU),
/// 989 sleeps of the loop in 20,000 requests against 306, twice the context switches, and 5–10%
/// more time. Each lock and unlock here looks up the thread's ID, a call; for the loop's one lock
/// a turn that is nothing.
@frozen
public struct HandoffMutex<Value: ~Copyable>: ~Copyable {
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
    /// thread holds it (after asking the kernel, which may find it given up meanwhile).
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

extension HandoffMutex: @unchecked Sendable where Value: ~Copyable {}
