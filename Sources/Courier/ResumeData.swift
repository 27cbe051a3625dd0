import CourierPolicies
import Foundation

/// The user-info key of a failed download's resume data (FoundationNetworking's name).
public let URLSessionDownloadTaskResumeData = "NSURLSessionDownloadTaskResumeData"
/// The same key under Apple's Objective-C name.
public let NSURLSessionDownloadTaskResumeData = URLSessionDownloadTaskResumeData

/// Courier extension: the user-info key of the partial file a failed download kept, a file URL,
/// when the session's configuration sets ``URLSessionConfiguration/courierKeepsPartialDownloads``.
public let CourierPartialDownloadFileKey = "CourierPartialDownloadFile"

extension URLError {
    /// Courier extension: the file holding what a failed download wrote, kept for the caller
    /// under ``URLSessionConfiguration/courierKeepsPartialDownloads``; nil otherwise.
    public var courierPartialDownloadFile: URL? { userInfo[CourierPartialDownloadFileKey] as? URL }

    /// This error naming the partial file a download kept.
    func adding(partialDownload file: URL) -> URLError {
        var info = userInfo
        info[CourierPartialDownloadFileKey] = file
        return URLError(code, userInfo: info)
    }

    /// The resume data of a download that failed mid-body, when it can be resumed: give it to
    /// `downloadTask(withResumeData:)` or `download(resumeFrom:)`.
    public var downloadTaskResumeData: Data? { userInfo[URLSessionDownloadTaskResumeData] as? Data }

    /// This error with resume data added to its user info.
    func adding(resumeData: Data) -> URLError {
        var info = userInfo
        info[URLSessionDownloadTaskResumeData] = resumeData
        return URLError(code, userInfo: info)
    }
}

/// What a download needs to go on where it stopped: Courier's resume data.
///
/// The blob is a binary property list: a version, the task's original and current requests
/// (keyed archives of `NSURLRequest`), the partial file (a `CourierPartial_*.partial` file in the
/// temporary directory), how many of the entity's bytes it holds, the validator that must still
/// match (a strong ETag, else the Last-Modified date), the entity's whole length when known, and
/// when the blob was made. It names a file, so it outlives the process as long as the file does:
/// partial files are kept until resumed or until ``PartialDownloadFiles/maximumAge`` passes.
struct ResumeData: Sendable {
    /// The version written; a blob of another version is refused.
    static let version = 1
    static let versionKey = "CourierResumeDataVersion"

    var originalRequest: URLRequest
    var currentRequest: URLRequest
    var partialFile: URL
    /// Bytes of the entity in the partial file: the offset the download goes on from.
    var offset: Int64
    var validator: String
    /// The entity's whole length; -1 when unknown.
    var expectedLength: Int64
    var createdAt: Date

    private enum Key {
        static let originalRequest = "OriginalRequest"
        static let currentRequest = "CurrentRequest"
        static let partialFile = "PartialFile"
        static let offset = "Offset"
        static let validator = "Validator"
        static let expectedLength = "ExpectedLength"
        static let createdAt = "CreatedAt"
    }

    /// The blob, or nil when a request cannot be archived.
    func encoded() -> Data? {
        guard let original = Self.archive(originalRequest), let current = Self.archive(currentRequest) else { return nil }
        let plist: [String: Any] = [
            Self.versionKey: Self.version,
            Key.originalRequest: original,
            Key.currentRequest: current,
            Key.partialFile: partialFile.path,
            Key.offset: offset,
            Key.validator: validator,
            Key.expectedLength: expectedLength,
            Key.createdAt: createdAt,
        ]
        return try? PropertyListSerialization.data(fromPropertyList: plist, format: .binary, options: 0)
    }

    /// Reads a blob; a clear `.cannotDecodeRawData` for anything not made by this version of
    /// Courier (damaged, foreign, or naming a file that is not one of its partial files).
    static func decode(_ data: Data) throws(URLError) -> ResumeData {
        func refuse(_ why: String, url: URL? = nil) -> URLError {
            .courier(.cannotDecodeRawData, "The resume data cannot be used: \(why).", url: url)
        }
        let object: Any
        do {
            object = try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
        } catch {
            throw refuse("it is not resume data made by Courier")
        }
        guard let plist = object as? [String: Any], let version = plist[versionKey] as? Int else {
            throw refuse("it is not resume data made by Courier")
        }
        guard version == Self.version else {
            throw refuse("it is of version \(version), and this Courier reads version \(Self.version)")
        }
        guard let originalArchive = plist[Key.originalRequest] as? Data, let original = unarchive(originalArchive),
              let currentArchive = plist[Key.currentRequest] as? Data, let current = unarchive(currentArchive) else {
            throw refuse("its requests are damaged")
        }
        guard let path = plist[Key.partialFile] as? String, let offset = (plist[Key.offset] as? NSNumber)?.int64Value, offset >= 0,
              let validator = plist[Key.validator] as? String, !validator.isEmpty,
              let expected = (plist[Key.expectedLength] as? NSNumber)?.int64Value,
              let createdAt = plist[Key.createdAt] as? Date else {
            throw refuse("it is damaged", url: current.url)
        }
        let file = URL(fileURLWithPath: path)
        guard PartialDownloadFiles.isPartialFileName(file.lastPathComponent), path.hasPrefix("/") else {
            throw refuse("it names \(path), which is not a partial download file", url: current.url)
        }
        return ResumeData(
            originalRequest: original, currentRequest: current, partialFile: file, offset: offset,
            validator: validator, expectedLength: expected, createdAt: createdAt
        )
    }

    private static func archive(_ request: URLRequest) -> Data? {
        var bodyless = request
        bodyless.httpBodyStream = nil
        return try? NSKeyedArchiver.archivedData(withRootObject: NSURLRequest(request: bodyless), requiringSecureCoding: true)
    }

    private static func unarchive(_ data: Data) -> URLRequest? {
        (try? NSKeyedUnarchiver.unarchivedObject(ofClass: NSURLRequest.self, from: data))?.request
    }

    /// The validator `If-Range` can carry for `response`: a strong ETag, else the Last-Modified
    /// date; nil when it has neither (a weak ETag cannot make a range conditional).
    static func validator(of response: HTTPURLResponse) -> String? {
        if let tag = response.value(forHTTPHeaderField: "ETag"), tag.hasPrefix("\"") { return tag }
        if let date = response.value(forHTTPHeaderField: "Last-Modified"), HTTPDate.parse(date) != nil { return date }
        return nil
    }
}

/// A resumed download's place in the entity, read from a 206's `Content-Range`.
struct ContentRange: Equatable {
    var first: Int64
    var last: Int64
    /// The entity's length; nil for `*`.
    var length: Int64?

    /// Parses `bytes FIRST-LAST/LENGTH` (RFC 9110 §14.4); nil for anything else.
    init?(_ value: String) {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let bounds = halves[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, last >= first else { return nil }
        self.first = first
        self.last = last
        if halves[1] == "*" {
            length = nil
        } else {
            guard let length = Int64(halves[1]), length > last else { return nil }
            self.length = length
        }
    }
}
