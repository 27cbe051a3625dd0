import CourierCore
import Foundation

/// What the session's logs may show of header fields: secrets never appear.
enum LogRedaction {
    /// Lower-cased names whose values are always replaced: credentials and cookies.
    static let redactedFieldNames: Set<String> = ["authorization", "proxy-authorization", "cookie", "set-cookie"]

    /// The value to log for a field: the value, or a placeholder for a secret.
    static func value(_ value: String, forField name: String) -> String {
        redactedFieldNames.contains(name.lowercased()) ? "<redacted>" : value
    }

    /// A URL for a log message: a password in its user part (`user:password@`) replaced by
    /// `redacted`.
    static func url(_ url: URL?) -> String {
        guard let url else { return "" }
        guard url.password(percentEncoded: true) != nil, var components = URLComponents(url: url, resolvingAgainstBaseURL: true) else {
            return url.absoluteString
        }
        components.password = "redacted"
        return components.string ?? "<a URL with a password>"
    }

    /// Fields as one line for a log message, secrets redacted.
    static func describe(_ fields: HTTPFields) -> String {
        fields.fields.map { "\($0.name): \(value($0.value, forField: $0.name))" }.joined(separator: "; ")
    }
}
