@testable import Courier
import CourierSync
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A directory of its own under the temporary directory; `remove()` deletes it with all in it.
/// The tests never use the user's real store: every file storage here lives in one of these.
private struct TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("CourierCredentialStorageTests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// A store file in the directory.
    var store: URL { url.appendingPathComponent("credentials.sqlite") }

    func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}

/// The permission bits of the file at `path`; nil when there is no file.
private func permissions(_ path: String) -> mode_t? {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    return status.st_mode & 0o777
}

/// Counts the change notifications of one storage.
private final class NotificationCounter: Sendable {
    private let value = Mutex(0)

    func increment() { value.withLock { $0 += 1 } }
    var count: Int { value.withLock { $0 } }
}

/// An https Basic space on example.com:443 with `realm`.
private func space(realm: String? = "Staff") -> URLProtectionSpace {
    URLProtectionSpace(host: "example.com", port: 443, protocol: NSURLProtectionSpaceHTTPS, realm: realm, authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
}

/// An HTTP proxy space.
private func proxySpace() -> URLProtectionSpace {
    URLProtectionSpace(proxyHost: "proxy.example", port: 3128, type: NSURLProtectionSpaceHTTPProxy, realm: nil, authenticationMethod: NSURLAuthenticationMethodHTTPBasic)
}

/// The user names of `credentials`, sorted.
private func users(_ credentials: [String: URLCredential]?) -> [String]? {
    credentials?.keys.sorted()
}

@Suite("URLCredentialStorage: per-space credentials, defaults, the file of permanent ones")
struct CredentialStorageTests {
    // MARK: In memory

    @Test("set keeps credentials by user per space; the first becomes the default; remove takes one out")
    func setDefaultRemove() {
        let storage = URLCredentialStorage(store: .memory)
        let staff = space()
        let alice = URLCredential(user: "alice", password: "a1", persistence: .forSession)
        let bob = URLCredential(user: "bob", password: "b1", persistence: .forSession)
        #expect(storage.credentials(for: staff) == nil)
        #expect(storage.defaultCredential(for: staff) == nil)

        storage.set(alice, for: staff)
        storage.set(bob, for: staff)
        #expect(users(storage.credentials(for: staff)) == ["alice", "bob"])
        #expect(storage.credentials(for: staff)?["bob"]?.password == "b1")
        #expect(storage.defaultCredential(for: staff) == alice)
        // An equal space made anew finds them; another realm on the same host has none.
        #expect(users(storage.credentials(for: space())) == ["alice", "bob"])
        #expect(storage.credentials(for: space(realm: "Guests")) == nil)
        #expect(storage.credentials(for: space(realm: nil)) == nil)

        // The same user replaces the credential.
        let newBob = URLCredential(user: "bob", password: "b2", persistence: .forSession)
        storage.set(newBob, for: staff)
        #expect(storage.credentials(for: staff)?["bob"] == newBob)
        #expect(storage.credentials(for: staff)?.count == 2)

        storage.setDefaultCredential(newBob, for: staff)
        #expect(storage.defaultCredential(for: staff) == newBob)

        // Removing the default leaves the space without one; the other credential stays.
        storage.remove(newBob, for: staff)
        #expect(storage.defaultCredential(for: staff) == nil)
        #expect(users(storage.credentials(for: staff)) == ["alice"])

        // Removing is by user: the password does not have to match.
        storage.remove(URLCredential(user: "alice", password: "other", persistence: .forSession), for: staff)
        #expect(storage.credentials(for: staff) == nil)
        #expect(storage.allCredentials.isEmpty)
    }

    @Test("setDefaultCredential stores a credential the space did not have")
    func setDefaultStores() {
        let storage = URLCredentialStorage(store: .memory)
        let staff = space()
        storage.set(URLCredential(user: "alice", password: "a", persistence: .forSession), for: staff)
        let carol = URLCredential(user: "carol", password: "c", persistence: .forSession)
        storage.setDefaultCredential(carol, for: staff)
        #expect(storage.defaultCredential(for: staff) == carol)
        #expect(users(storage.credentials(for: staff)) == ["alice", "carol"])
    }

    @Test(".none credentials are never stored, by set or by setDefaultCredential")
    func noneIsNotStored() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let storage = URLCredentialStorage(store: .file(directory.store))
        let staff = space()
        let none = URLCredential(user: "alice", password: "a", persistence: .none)
        storage.set(none, for: staff)
        storage.setDefaultCredential(none, for: staff)
        #expect(storage.credentials(for: staff) == nil)
        #expect(storage.defaultCredential(for: staff) == nil)
        #expect(storage.allCredentials.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: directory.store.path))
    }

    @Test("allCredentials has every space that has credentials, with its credentials by user")
    func allCredentials() {
        let storage = URLCredentialStorage(store: .memory)
        storage.set(URLCredential(user: "alice", password: "a", persistence: .forSession), for: space())
        storage.set(URLCredential(user: "bob", password: "b", persistence: .permanent), for: space())
        storage.set(URLCredential(user: "carol", password: "c", persistence: .forSession), for: space(realm: "Guests"))
        storage.set(URLCredential(user: "dave", password: "d", persistence: .forSession), for: proxySpace())

        let all = storage.allCredentials
        #expect(all.count == 3)
        #expect(users(all[space()]) == ["alice", "bob"])
        #expect(users(all[space(realm: "Guests")]) == ["carol"])
        #expect(all[proxySpace()]?["dave"]?.password == "d")
        #expect(all.keys.contains(where: { $0.isProxy() && $0.host == "proxy.example" && $0.port == 3128 }))

        storage.remove(URLCredential(user: "dave", password: "d", persistence: .forSession), for: proxySpace())
        #expect(storage.allCredentials.count == 2)
    }

    // MARK: Notifications

    @Test("every change posts one notification with the storage as object; a call that changes nothing posts none")
    func notifications() {
        let storage = URLCredentialStorage(store: .memory)
        let counter = NotificationCounter()
        let token = NotificationCenter.default.addObserver(forName: .NSURLCredentialStorageChanged, object: storage, queue: nil) { notification in
            if (notification.object as? URLCredentialStorage) === storage { counter.increment() }
        }
        defer { NotificationCenter.default.removeObserver(token) }
        let staff = space()
        let alice = URLCredential(user: "alice", password: "a", persistence: .forSession)
        let bob = URLCredential(user: "bob", password: "b", persistence: .forSession)

        storage.set(alice, for: staff)
        #expect(counter.count == 1)
        // An equal credential, already the default: nothing changes.
        storage.set(URLCredential(user: "alice", password: "a", persistence: .forSession), for: staff)
        storage.setDefaultCredential(alice, for: staff)
        storage.set(URLCredential(user: "alice", password: "a", persistence: .none), for: staff)
        #expect(counter.count == 1)

        storage.set(URLCredential(user: "alice", password: "changed", persistence: .forSession), for: staff)
        #expect(counter.count == 2)
        storage.set(bob, for: staff)
        #expect(counter.count == 3)
        // The same credential made the default is a change.
        storage.setDefaultCredential(bob, for: staff)
        #expect(counter.count == 4)

        storage.remove(alice, for: staff)
        #expect(counter.count == 5)
        storage.remove(alice, for: staff)
        storage.remove(URLCredential(user: "nobody", password: "x", persistence: .forSession), for: staff)
        storage.remove(bob, for: space(realm: "Guests"))
        #expect(counter.count == 5)
    }

    // MARK: Synchronizable

    @Test(".synchronizable credentials are removed only with NSURLCredentialStorageRemoveSynchronizableCredentials true")
    func synchronizableRemoval() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let storage = URLCredentialStorage(store: .file(directory.store))
        let staff = space()
        let synced = URLCredential(user: "sam", password: "s", persistence: .synchronizable)
        storage.set(synced, for: staff)

        storage.remove(synced, for: staff)
        storage.remove(synced, for: staff, options: [:])
        storage.remove(synced, for: staff, options: nil)
        storage.remove(synced, for: staff, options: [NSURLCredentialStorageRemoveSynchronizableCredentials: NSNumber(value: false)])
        // Another persistence for the same user does not get around the rule.
        storage.remove(URLCredential(user: "sam", password: "s", persistence: .permanent), for: staff)
        #expect(storage.credentials(for: staff)?["sam"] == synced)
        // Kept on disk as synchronizable, so the rule holds for later storages too.
        let reader = URLCredentialStorage(store: .file(directory.store))
        #expect(reader.credentials(for: staff)?["sam"]?.persistence == .synchronizable)

        storage.remove(synced, for: staff, options: [NSURLCredentialStorageRemoveSynchronizableCredentials: NSNumber(value: true)])
        #expect(storage.credentials(for: staff) == nil)
        #expect(URLCredentialStorage(store: .file(directory.store)).credentials(for: staff) == nil)
    }

    // MARK: The file

    @Test(".permanent credentials reach the file, with their password; .forSession ones do not")
    func permanentOnDisk() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let staff = space()
        let writer = URLCredentialStorage(store: .file(directory.store))
        writer.set(URLCredential(user: "session", password: "s", persistence: .forSession), for: staff)
        writer.set(URLCredential(user: "kept", password: "k", persistence: .permanent), for: staff)
        writer.set(URLCredential(user: "synced", password: "y", persistence: .synchronizable), for: staff)
        #expect(users(writer.credentials(for: staff)) == ["kept", "session", "synced"])

        let reader = URLCredentialStorage(store: .file(directory.store))
        let seen = reader.credentials(for: staff)
        #expect(users(seen) == ["kept", "synced"])
        #expect(seen?["kept"]?.password == "k")
        #expect(seen?["kept"]?.persistence == .permanent)
        #expect(seen?["synced"]?.password == "y")
        // The default is the session credential, which stayed in memory.
        #expect(writer.defaultCredential(for: staff)?.user == "session")
        #expect(reader.defaultCredential(for: staff) == nil)

        // A session credential replacing a permanent one takes it off the disk.
        writer.set(URLCredential(user: "kept", password: "k2", persistence: .forSession), for: staff)
        #expect(users(URLCredentialStorage(store: .file(directory.store)).credentials(for: staff)) == ["synced"])
        // Replacing a permanent one writes the new password over the old row.
        writer.set(URLCredential(user: "synced", password: "y2", persistence: .permanent), for: staff)
        let last = URLCredentialStorage(store: .file(directory.store)).credentials(for: staff)
        #expect(users(last) == ["synced"])
        #expect(last?["synced"]?.password == "y2")
        #expect(last?["synced"]?.persistence == .permanent)
    }

    @Test("the default mark is kept on disk, moves with setDefaultCredential and goes with remove")
    func defaultOnDisk() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let staff = space()
        let writer = URLCredentialStorage(store: .file(directory.store))
        let alice = URLCredential(user: "alice", password: "a", persistence: .permanent)
        let bob = URLCredential(user: "bob", password: "b", persistence: .permanent)
        writer.set(alice, for: staff)
        writer.set(bob, for: staff)
        #expect(URLCredentialStorage(store: .file(directory.store)).defaultCredential(for: staff) == alice)

        writer.setDefaultCredential(bob, for: staff)
        let reader = URLCredentialStorage(store: .file(directory.store))
        #expect(reader.defaultCredential(for: staff) == bob)
        #expect(users(reader.credentials(for: staff)) == ["alice", "bob"])

        writer.remove(bob, for: staff)
        let after = URLCredentialStorage(store: .file(directory.store))
        #expect(after.defaultCredential(for: staff) == nil)
        #expect(users(after.credentials(for: staff)) == ["alice"])
    }

    @Test("spaces come back from the file as they went in: nil and empty realms apart, proxy spaces as proxies")
    func spacesRoundTrip() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let writer = URLCredentialStorage(store: .file(directory.store))
        writer.set(URLCredential(user: "alice", password: "a", persistence: .permanent), for: space(realm: nil))
        writer.set(URLCredential(user: "bob", password: "b", persistence: .permanent), for: space(realm: ""))
        writer.set(URLCredential(user: "carol", password: "c", persistence: .permanent), for: proxySpace())
        let plain = URLProtectionSpace(host: "example.com", port: 80, protocol: NSURLProtectionSpaceHTTP, realm: nil, authenticationMethod: nil)
        writer.set(URLCredential(user: "dave", password: "d", persistence: .permanent), for: plain)

        let reader = URLCredentialStorage(store: .file(directory.store))
        #expect(users(reader.credentials(for: space(realm: nil))) == ["alice"])
        #expect(users(reader.credentials(for: space(realm: ""))) == ["bob"])
        #expect(users(reader.credentials(for: proxySpace())) == ["carol"])
        #expect(users(reader.credentials(for: plain)) == ["dave"])
        let all = reader.allCredentials
        #expect(all.count == 4)
        let proxy = try #require(all.keys.first(where: { $0.isProxy() }))
        #expect(proxy.proxyType == NSURLProtectionSpaceHTTPProxy)
        #expect(proxy.protocol == nil)
        #expect(proxy.realm == nil)
        #expect(all.keys.contains(where: { $0.authenticationMethod == NSURLAuthenticationMethodDefault && $0.port == 80 }))
    }

    @Test("the file is 0600 (its -wal and -shm too), a directory made for it 0700, and reading makes no file")
    func fileModes() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let nested = directory.url.appendingPathComponent("data/courier", isDirectory: true)
        let file = nested.appendingPathComponent("credentials.sqlite")
        let storage = URLCredentialStorage(store: .file(file))
        let staff = space()

        // Reads, and a session credential, leave no file behind.
        #expect(storage.credentials(for: staff) == nil)
        #expect(storage.allCredentials.isEmpty)
        storage.set(URLCredential(user: "session", password: "s", persistence: .forSession), for: staff)
        #expect(!FileManager.default.fileExists(atPath: nested.path))

        storage.set(URLCredential(user: "alice", password: "a", persistence: .permanent), for: staff)
        withExtendedLifetime(storage) {
            #expect(permissions(file.path) == 0o600)
            #expect(permissions(nested.path) == 0o700)
            #expect(permissions(nested.deletingLastPathComponent().path) == 0o700)
            // While the connection is open the WAL files exist; they must be as private as the file.
            for suffix in ["-wal", "-shm"] {
                if let mode = permissions(file.path + suffix) {
                    #expect(mode == 0o600, "\(suffix)")
                }
            }
        }
    }

    @Test("an existing file readable by others is narrowed to 0600")
    func existingFileNarrowed() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // An empty file is an empty database to SQLite.
        #expect(FileManager.default.createFile(atPath: directory.store.path, contents: nil))
        #expect(chmod(directory.store.path, 0o644) == 0)
        #expect(permissions(directory.store.path) == 0o644)
        let storage = URLCredentialStorage(store: .file(directory.store))
        storage.set(URLCredential(user: "alice", password: "a", persistence: .permanent), for: space())
        withExtendedLifetime(storage) {
            #expect(permissions(directory.store.path) == 0o600)
        }
        #expect(URLCredentialStorage(store: .file(directory.store)).credentials(for: space())?["alice"]?.password == "a")
    }

    @Test("two storages on one file, each adding its own credential, lose neither")
    func noLostUpdate() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let staff = space()
        let seed = URLCredentialStorage(store: .file(directory.store))
        seed.set(URLCredential(user: "carol", password: "c", persistence: .permanent), for: staff)

        let first = URLCredentialStorage(store: .file(directory.store))
        let second = URLCredentialStorage(store: .file(directory.store))
        // Both read the file before either writes.
        #expect(users(first.credentials(for: staff)) == ["carol"])
        #expect(users(second.credentials(for: staff)) == ["carol"])
        first.set(URLCredential(user: "alice", password: "a", persistence: .permanent), for: staff)
        second.set(URLCredential(user: "bob", password: "b", persistence: .permanent), for: staff)
        second.remove(URLCredential(user: "carol", password: "c", persistence: .permanent), for: staff)

        let reader = URLCredentialStorage(store: .file(directory.store))
        #expect(users(reader.credentials(for: staff)) == ["alice", "bob"])
        #expect(reader.credentials(for: staff)?["alice"]?.password == "a")
        #expect(reader.credentials(for: staff)?["bob"]?.password == "b")
    }

    @Test("two storages on one file, written from many tasks at once, keep every credential")
    func concurrentWriters() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let staff = space()
        let first = URLCredentialStorage(store: .file(directory.store))
        let second = URLCredentialStorage(store: .file(directory.store))
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<10 {
                group.addTask {
                    first.set(URLCredential(user: "first-\(index)", password: "p\(index)", persistence: .permanent), for: staff)
                }
                group.addTask {
                    second.set(URLCredential(user: "second-\(index)", password: "q\(index)", persistence: .permanent), for: staff)
                }
            }
        }
        let reader = URLCredentialStorage(store: .file(directory.store))
        let seen = reader.credentials(for: staff)
        #expect(seen?.count == 20)
        #expect(seen?["first-3"]?.password == "p3")
        #expect(seen?["second-7"]?.password == "q7")
        // Each storage has at least its own.
        #expect((first.credentials(for: staff)?.count ?? 0) >= 10)
        #expect((second.credentials(for: staff)?.count ?? 0) >= 10)
    }

    @Test("a damaged file is moved aside and a new one started; the storage works")
    func corruptFile() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Data(repeating: 0x5A, count: 4096).write(to: directory.store)
        let staff = space()
        let storage = URLCredentialStorage(store: .file(directory.store))
        #expect(storage.credentials(for: staff) == nil)
        storage.set(URLCredential(user: "alice", password: "a", persistence: .permanent), for: staff)
        #expect(storage.credentials(for: staff)?["alice"]?.password == "a")

        let names = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
        let aside = try #require(names.first(where: { $0.hasPrefix("credentials.sqlite.corrupt-") && !$0.hasSuffix("-wal") }))
        // The damaged bytes are kept, for whoever wants to look.
        #expect(try Data(contentsOf: directory.url.appendingPathComponent(aside)) == Data(repeating: 0x5A, count: 4096))
        // The new file holds what was set after.
        #expect(URLCredentialStorage(store: .file(directory.store)).credentials(for: staff)?["alice"]?.password == "a")
    }

    @Test("a store that cannot be created (its directory would be under a regular file) leaves the storage working in memory")
    func unwritableLocation() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let blocker = directory.url.appendingPathComponent("blocker")
        try Data("a regular file".utf8).write(to: blocker)
        let file = blocker.appendingPathComponent("courier/credentials.sqlite")
        let staff = space()
        let storage = URLCredentialStorage(store: .file(file))
        let alice = URLCredential(user: "alice", password: "a", persistence: .permanent)
        let bob = URLCredential(user: "bob", password: "b", persistence: .permanent)
        storage.set(alice, for: staff)
        storage.setDefaultCredential(bob, for: staff)
        #expect(users(storage.credentials(for: staff)) == ["alice", "bob"])
        #expect(storage.defaultCredential(for: staff) == bob)
        storage.remove(bob, for: staff)
        #expect(users(storage.credentials(for: staff)) == ["alice"])
        #expect(!FileManager.default.fileExists(atPath: file.path))
        #expect(try Data(contentsOf: blocker) == Data("a regular file".utf8))
    }

    @Test("an in-memory storage keeps permanent credentials in memory only")
    func memoryStoreKeepsPermanent() {
        let storage = URLCredentialStorage(store: .memory)
        let alice = URLCredential(user: "alice", password: "a", persistence: .permanent)
        storage.set(alice, for: space())
        #expect(storage.credentials(for: space())?["alice"] == alice)
        #expect(URLCredentialStorage(store: .memory).credentials(for: space()) == nil)
    }

    @Test("the default file is $XDG_DATA_HOME/courier/credentials.sqlite, else under ~/.local/share")
    func defaultLocation() {
        let xdg = URLCredentialStorage.defaultStoreURL(environment: ["XDG_DATA_HOME": "/data", "HOME": "/home/u"])
        #expect(xdg.path == "/data/courier/credentials.sqlite")
        let home = URLCredentialStorage.defaultStoreURL(environment: ["HOME": "/home/u"])
        #expect(home.path == "/home/u/.local/share/courier/credentials.sqlite")
        // A relative XDG_DATA_HOME is invalid and ignored.
        let relative = URLCredentialStorage.defaultStoreURL(environment: ["XDG_DATA_HOME": "data", "HOME": "/home/u"])
        #expect(relative.path == "/home/u/.local/share/courier/credentials.sqlite")
    }

    // MARK: On behalf of a task

    @Test("the task-based, completion-handler and async forms act like the plain ones")
    func taskForms() async throws {
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: URL(string: "http://127.0.0.1:9/")!)
        let storage = URLCredentialStorage(store: .memory)
        let staff = space()
        let alice = URLCredential(user: "alice", password: "a", persistence: .forSession)
        let bob = URLCredential(user: "bob", password: "b", persistence: .forSession)

        storage.set(alice, for: staff, task: task)
        storage.setDefaultCredential(bob, for: staff, task: task)

        let handed: [String: URLCredential]? = await withCheckedContinuation { continuation in
            storage.getCredentials(for: staff, task: task) { continuation.resume(returning: $0) }
        }
        #expect(users(handed) == ["alice", "bob"])
        let awaited = await storage.credentials(for: staff, task: task)
        #expect(users(awaited) == ["alice", "bob"])

        let handedDefault: URLCredential? = await withCheckedContinuation { continuation in
            storage.getDefaultCredential(for: staff, task: task) { continuation.resume(returning: $0) }
        }
        #expect(handedDefault == bob)
        let awaitedDefault = await storage.defaultCredential(for: staff, task: task)
        #expect(awaitedDefault == bob)

        storage.remove(bob, for: staff, task: task)
        let afterRemove = await storage.defaultCredential(for: staff, task: task)
        #expect(afterRemove == nil)
        let synced = URLCredential(user: "sam", password: "s", persistence: .synchronizable)
        storage.set(synced, for: staff, task: task)
        storage.remove(synced, for: staff, options: [:], task: task)
        #expect(storage.credentials(for: staff)?["sam"] == synced)
        storage.remove(synced, for: staff, options: [NSURLCredentialStorageRemoveSynchronizableCredentials: NSNumber(value: true)], task: task)
        let remaining = await storage.credentials(for: staff, task: task)
        #expect(users(remaining) == ["alice"])
        #expect(task.state == .suspended)
    }

    // MARK: Configurations

    @Test("a default configuration has the shared storage, an ephemeral one its own; copies share it; nil is allowed")
    func configurationStorage() throws {
        #expect(URLSessionConfiguration.default.urlCredentialStorage === URLCredentialStorage.shared)

        let ephemeral = URLSessionConfiguration.ephemeral
        let storage = try #require(ephemeral.urlCredentialStorage)
        #expect(storage !== URLCredentialStorage.shared)
        #expect(URLSessionConfiguration.ephemeral.urlCredentialStorage !== storage)

        let copy = try #require(ephemeral.copy() as? URLSessionConfiguration)
        #expect(copy.urlCredentialStorage === storage)
        let session = URLSession(configuration: copy)
        defer { session.invalidateAndCancel() }
        #expect(session.configuration.urlCredentialStorage === storage)

        ephemeral.urlCredentialStorage = nil
        #expect(ephemeral.urlCredentialStorage == nil)
        let copyOfNil = try #require(ephemeral.copy(with: nil) as? URLSessionConfiguration)
        #expect(copyOfNil.urlCredentialStorage == nil)
        #expect(copy.urlCredentialStorage === storage)
    }

    // MARK: URLCredential and URLProtectionSpace

    @Test("credentials are equal, and hash alike, when user, password and persistence are")
    func credentialEquality() {
        let credential = URLCredential(user: "u", password: "p", persistence: .permanent)
        let same = URLCredential(user: "u", password: "p", persistence: .permanent)
        #expect(credential == same)
        #expect(credential.hash == same.hash)
        #expect(credential != URLCredential(user: "u", password: "q", persistence: .permanent))
        #expect(credential != URLCredential(user: "v", password: "p", persistence: .permanent))
        #expect(credential != URLCredential(user: "u", password: "p", persistence: .forSession))
        #expect(!credential.isEqual("u"))
        #expect(Set([credential, same]).count == 1)
    }

    @Test("a password credential survives a secure keyed archive")
    func credentialArchive() throws {
        #expect(URLCredential.supportsSecureCoding)
        let credential = URLCredential(user: "carol", password: "c secret", persistence: .synchronizable)
        let data = try NSKeyedArchiver.archivedData(withRootObject: credential, requiringSecureCoding: true)
        let decoded = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: URLCredential.self, from: data))
        #expect(decoded == credential)
        #expect(decoded.user == "carol")
        #expect(decoded.password == "c secret")
        #expect(decoded.persistence == .synchronizable)
    }

    @Test("protection spaces equal by their fields hash alike and work as dictionary keys")
    func protectionSpaceHash() {
        #expect(space() == space())
        #expect(space().hash == space().hash)
        #expect(space() != space(realm: "Other"))
        #expect(space(realm: nil) != space(realm: ""))
        #expect(proxySpace() == proxySpace())
        let keyed: [URLProtectionSpace: Int] = [space(): 1, space(realm: "Other"): 2, proxySpace(): 3]
        #expect(keyed[space()] == 1)
        #expect(keyed[space(realm: "Other")] == 2)
        #expect(keyed[proxySpace()] == 3)
        #expect(NSURLProtectionSpaceFTP == "ftp")
        #expect(NSURLProtectionSpaceFTPProxy == "ftp")
    }
}
