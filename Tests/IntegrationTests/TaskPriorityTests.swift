import Courier
import Foundation
import Testing
import _CourierTestSupport

/// `URLSessionTask.priority` on the wire: RFC 9218's `Priority: u=N`, as nginx's echo saw it.
@Suite("Task priority")
struct TaskPriorityTests {
    /// The `Priority` field nginx received for a task of `priority`, and the caller's own field.
    func sentPriority(_ priority: Float?, callerField: String? = nil) async throws -> String? {
        let nginx = try NginxServer.shared()
        let session = URLSession(configuration: .uncached)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: nginx.url("/echo"))
        if let callerField { request.setValue(callerField, forHTTPHeaderField: "Priority") }
        let data: Data? = await withCheckedContinuation { continuation in
            let task = session.dataTask(with: request) { data, _, _ in continuation.resume(returning: data) }
            if let priority { task.priority = priority }
            task.resume()
        }
        let echo = try JSONSerialization.jsonObject(with: try #require(data)) as? [String: Any]
        let headers = try #require(echo?["headers"] as? [String: String])
        return headers.first { $0.key.lowercased() == "priority" }?.value
    }

    @Test("priority maps to urgency: 1 → 0, high → 1, low → 5, 0 → 7", arguments: [
        (Float(1), "u=0"), (URLSessionTask.highPriority, "u=1"), (URLSessionTask.lowPriority, "u=5"), (Float(0), "u=7"),
    ])
    func urgency(_ row: (Float, String)) async throws {
        #expect(try await sentPriority(row.0) == row.1)
    }

    @Test("the default priority sends no field (urgency 3 is the protocol's default)")
    func defaultPriority() async throws {
        #expect(try await sentPriority(nil) == nil)
        #expect(try await sentPriority(URLSessionTask.defaultPriority) == nil)
    }

    @Test("a Priority field the caller set is sent as it is")
    func callerField() async throws {
        #expect(try await sentPriority(URLSessionTask.highPriority, callerField: "u=6, i") == "u=6, i")
    }
}
