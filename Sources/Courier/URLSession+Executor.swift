extension URLSession {
    /// Courier extension: an executor on the event loop that carries this session's
    /// connections, for the async calls that must go fastest.
    ///
    /// A task that prefers it (`withTaskExecutorPreference(session.courierTaskExecutor) { … }`,
    /// or `Task(executorPreference:)`) runs on the loop's thread: `data(for:)` and the other
    /// async calls send their request from there, on a connection of that loop, and the task is
    /// resumed there when the response is in, where from any other executor each call crosses
    /// to the loop and back through the global pool (two thread wake-ups). The session's other
    /// work goes on as usual.
    ///
    /// - Warning: the loop serves every connection on it while the task runs: keep the work
    ///   done there short, and never block it (a semaphore, a lock held across an `await`, a
    ///   synchronous read of a stream that the loop feeds, a long computation); hand such work
    ///   to another executor. The global concurrent executor when the session's event loops
    ///   could not be started (its requests fail anyway).
    public var courierTaskExecutor: any TaskExecutor {
        loader.taskExecutor ?? globalConcurrentExecutor
    }
}
