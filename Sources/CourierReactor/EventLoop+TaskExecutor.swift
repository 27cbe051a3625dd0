/// A loop runs Swift tasks that prefer it (`withTaskExecutorPreference`, SE-0417) among its
/// own work: a task that starts I/O there starts it at once, and a continuation resumed by an
/// I/O callback is queued on the same thread instead of waking a thread of the global pool.
/// A job enqueued from another thread wakes the loop like any ``EventLoop/execute(_:)``; one
/// enqueued on the loop runs after the current turn's events. Jobs run on the loop's own
/// thread: while one waits, no thread borrows the loop (``EventLoop/runBorrowing(_:)``). A
/// task must never block on its loop (a semaphore, a synchronous read of a stream the loop
/// feeds): the loop is what would have to wake it. After ``EventLoop/shutdown()`` jobs are
/// dropped, as other work is.
extension EventLoop: TaskExecutor {
    public func enqueue(_ job: consuming ExecutorJob) {
        executeTask(UnownedJob(job))
    }
}
