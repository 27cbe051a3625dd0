import CourierCore
import CourierPolicies
import CourierTransport
import Foundation

/// A download task made from resume data: where it goes on from, and how far the server let it.
struct ResumeState {
    /// The resume data the task was made from, offered again when the task ends before the
    /// partial file was touched (a failure before any response).
    var blob: Data
    var data: ResumeData
    /// The partial file, opened (and cut to the offset) when the task starts; nil before, when
    /// it is gone, and once the sink took it.
    var partial: DownloadFile?
    var opened = false
    /// True while requests ask for the rest of the entity (`Range` with `If-Range`); false once
    /// the file is gone, or the server refused the range in a way only a whole request mends.
    var sendsRange = true
}

/// What a resumed download's next request asks for: the bytes after `offset`, if the entity
/// still has `validator`.
struct ResumeRange {
    var offset: Int64
    var validator: String
}

extension TaskDriver.State {
    /// The range the next request of a resumed download asks for; nil when it asks for the
    /// whole entity (not resumed, no partial file, or the server refused the range).
    var resumeRange: ResumeRange? {
        guard resume?.sendsRange == true, resume?.partial != nil, let data = resume?.data else { return nil }
        return ResumeRange(offset: data.offset, validator: data.validator)
    }
}

/// What a download task's sink is given at the end to make resume data.
struct ResumeOffer: Sendable {
    /// The handler of `cancel(byProducingResumeData:)`, called once with the data or nil.
    var handler: (@Sendable (Data?) -> Void)?
    /// How to describe the partial file once kept; nil when the download cannot be resumed.
    var recipe: Recipe?
    /// The resume data the task was made from, still valid: the task ended before its
    /// response, so the partial file is as it was.
    var unchanged: Data?

    struct Recipe: Sendable {
        var originalRequest: URLRequest
        var currentRequest: URLRequest
        var validator: String
        var expectedLength: Int64

        func resumeData(file: URL, offset: Int64) -> ResumeData {
            ResumeData(
                originalRequest: originalRequest, currentRequest: currentRequest, partialFile: file, offset: offset,
                validator: validator, expectedLength: expectedLength, createdAt: Date()
            )
        }
    }
}

/// Where a resumed download's body goes, decided by its response.
struct ResumePlacement {
    /// The partial file, or nil when it was gone (a new file is made).
    var partial: DownloadFile?
    /// Bytes kept at the start of the file: the offset on a 206 that continues it, else 0.
    var offset: Int64
    /// The entity's whole length, for `didResumeAtOffset`; -1 when unknown.
    var expectedTotal: Int64
    /// True when the response continues or restarts the entity (a 200 or 206):
    /// `didResumeAtOffset` is reported.
    var reportsResume: Bool
}

extension TaskDriver {
    /// Makes this task a resumption of `data` (called once, before the task starts).
    func resume(from data: ResumeData, blob: Data) {
        state.withLock { state in
            state.request = data.currentRequest
            state.resume = ResumeState(blob: blob, data: data)
        }
        task?.storage.withLock { $0.currentRequest = data.currentRequest }
    }

    /// Readies a task made from resume data as it starts: opens the partial file (one that is
    /// gone, shortened or not Courier's makes the download start over with a whole request).
    /// Returns the error the task fails with instead, when its resume data cannot be used.
    func prepareResume() -> URLError? {
        let (failure, partialFile) = state.withLock { state -> (URLError?, (url: URL, offset: Int64)?) in
            if let failure = state.startFailure { return (failure, nil) }
            guard let resume = state.resume, !resume.opened else { return (nil, nil) }
            state.resume?.opened = true
            return (nil, (resume.data.partialFile, resume.data.offset))
        }
        guard let (url, offset) = partialFile else { return failure }
        let partial = DownloadFile.reopen(partial: url, at: offset)
        if partial == nil {
            logger.debug("resume data's partial file is gone: starting over", metadata: ["task": "\(identifier)", "file": "\(url.path)"])
        }
        state.withLock { state in
            state.resume?.partial = partial
            if partial == nil { state.resume?.sendsRange = false }
        }
        return nil
    }

    /// Asks for `range`, the rest of a resumed download's entity, on its request.
    static func addResumeRange(_ range: ResumeRange, to request: inout TransportRequest) {
        request.head.fields.set(name: "Range", value: "bytes=\(range.offset)-")
        request.head.fields.set(name: "If-Range", value: range.validator)
    }

    /// Makes the task fail with `error` as soon as it starts (resume data it cannot use).
    func failWhenStarted(_ error: URLError) {
        state.withLock { $0.startFailure = error }
    }

    /// True when `head` answers the range of a resumed task in a way that cannot continue the
    /// file (a 416, or a 206 that starts elsewhere, is coded, or describes another entity): the
    /// exchange is dropped and the request goes again whole, its answer starting the file over.
    func refusesResumeRange(_ head: HTTPResponseHead, exchange: HTTPExchange) -> Bool {
        guard head.status == 416 || head.status == 206 else { return false }
        let resend = state.withLock { state -> Bool in
            guard state.exchange === exchange, state.resumeRangeSent, let resume = state.resume else { return false }
            if head.status == 206, Self.continues(resume.data, head) { return false }
            state.resume?.sendsRange = false
            state.exchange = nil
            return true
        }
        guard resend else { return false }
        logger.debug("the server refused the resume's range: loading the whole entity", metadata: ["task": "\(identifier)", "status": "\(head.status)"])
        exchange.cancel()
        startExchange()
        return true
    }

    /// True when a 206 continues the partial file of `data`: its range starts at the offset,
    /// the body is not coded, and its ETag and length (when given) are the entity's.
    private static func continues(_ data: ResumeData, _ head: HTTPResponseHead) -> Bool {
        guard let range = head.fields.first("Content-Range").flatMap(ContentRange.init), range.first == data.offset else { return false }
        if let coding = head.fields.first("Content-Encoding"), coding.lowercased() != "identity" { return false }
        if let tag = head.fields.first("ETag"), tag.hasPrefix("\""), data.validator.hasPrefix("\""), tag != data.validator { return false }
        if let length = range.length, data.expectedLength >= 0, length != data.expectedLength { return false }
        return true
    }

    /// Where a resumed task's body goes, once its final response arrived; nil for a task not
    /// made from resume data. The partial file passes to the caller (the sink).
    func resumePlacement(for response: URLResponse) -> ResumePlacement? {
        state.withLock { state -> ResumePlacement? in
            guard let resume = state.resume else { return nil }
            state.resume?.partial = nil
            let http = response as? HTTPURLResponse
            if state.resumeRangeSent, http?.statusCode == 206,
               let range = http?.value(forHTTPHeaderField: "Content-Range").flatMap(ContentRange.init) {
                let total = range.length ?? resume.data.expectedLength
                return ResumePlacement(partial: resume.partial, offset: resume.data.offset, expectedTotal: total, reportsResume: true)
            }
            return ResumePlacement(partial: resume.partial, offset: 0, expectedTotal: response.expectedContentLength, reportsResume: http?.statusCode == 200)
        }
    }

    /// Cancels the task, handing its resume data (or nil) to `handler` on the delegate queue
    /// before the completion.
    func cancel(producingResumeData handler: @escaping @Sendable (Data?) -> Void) {
        state.withLock { $0.resumeDataHandler = handler }
        cancel()
    }

    /// What the sink needs to make resume data as the task ends (under the task's lock), and
    /// the partial file nobody took: to close (its resume data is offered again) or delete.
    func resumeOffer(ending: TaskStateMachine.Ending, error: URLError?, in state: inout State) -> (ResumeOffer?, leftover: DownloadFile?, keepLeftover: Bool) {
        let handler = state.resumeDataHandler
        state.resumeDataHandler = nil
        let leftover = state.resume?.partial
        state.resume?.partial = nil
        // Resume data for a cancel that asked for it, and for a transfer that broke.
        let wanted = handler != nil || (ending == .exchangeFailed && !state.cancelRequested && error != nil && error?.code != .cancelled)
        guard wanted, sink is FileSink else {
            return (handler.map { ResumeOffer(handler: $0) }, leftover, false)
        }
        guard state.responseDelivered else {
            // No response yet: a resumed task's file is untouched and its resume data still good.
            let unchanged = state.resume.flatMap { $0.opened && leftover == nil ? nil : $0.blob }
            return (ResumeOffer(handler: handler, unchanged: unchanged), leftover, unchanged != nil)
        }
        return (ResumeOffer(handler: handler, recipe: recipe(in: state)), leftover, false)
    }

    /// How to describe the file of the delivered response as resume data; nil when it cannot
    /// be resumed: not a GET, no validator for `If-Range`, no byte ranges, or a coded body
    /// (the file holds decoded bytes, which the server's ranges do not count).
    private func recipe(in state: State) -> ResumeOffer.Recipe? {
        guard let response = state.response as? HTTPURLResponse, let request = state.request,
              (request.httpMethod ?? "GET") == "GET", let original = task?.originalRequest else { return nil }
        if let coding = response.value(forHTTPHeaderField: "Content-Encoding"), coding.lowercased() != "identity" { return nil }
        switch response.statusCode {
        case 200:
            let ranges = response.value(forHTTPHeaderField: "Accept-Ranges")?.lowercased()
                .split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == "bytes" } ?? false
            guard ranges, let validator = ResumeData.validator(of: response) else { return nil }
            return ResumeOffer.Recipe(originalRequest: original, currentRequest: request, validator: validator, expectedLength: response.expectedContentLength)
        case 206:
            guard let resume = state.resume, state.resumeRangeSent,
                  let range = response.value(forHTTPHeaderField: "Content-Range").flatMap(ContentRange.init) else { return nil }
            let validator = ResumeData.validator(of: response).flatMap { $0.hasPrefix("\"") ? $0 : nil } ?? resume.data.validator
            return ResumeOffer.Recipe(originalRequest: original, currentRequest: request, validator: validator, expectedLength: range.length ?? resume.data.expectedLength)
        default:
            return nil
        }
    }
}
